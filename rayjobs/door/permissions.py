"""Who may do what at the door: one table, pure (no I/O), and the one-line refusals.

=====================================  =====  ======  ======
action                                 admin  member  viewer
=====================================  =====  ======  ======
read (jobs, logs, metrics, queue, ...)  yes    yes     yes
queue a job as itself (and upload)      yes    yes     no
queue a job for another user            yes    no      no
stop / resume / rerun its own job       yes    yes     no
stop / resume / rerun another's job     yes    no      no
users: add, list, revoke                yes    no      no
audit: its own entries                  yes    yes     yes
audit: everyone's                       yes    no      no
=====================================  =====  ======  ======

A job's owner is its metadata ``user``. Jobs run as one OS user on the cluster: this is about who
may act through rayjobs and who did what, not isolation between users' code.
"""

from __future__ import annotations

from enum import Enum
from typing import Optional

ADMIN, MEMBER, VIEWER = "admin", "member", "viewer"


class Action(str, Enum):
    READ = "read"
    QUEUE = "queue"  #: as itself
    QUEUE_FOR_OTHERS = "queue for others"
    CONTROL_OWN = "control own"  #: stop, resume, rerun one's own job
    CONTROL_ANY = "control any"
    USERS = "users"
    AUDIT_OWN = "audit own"
    AUDIT_ALL = "audit all"


#: The table: (role, action) -> allowed. Every cell is spelled out (a test reads each one).
TABLE: dict[tuple[str, Action], bool] = {
    (ADMIN, Action.READ): True, (MEMBER, Action.READ): True, (VIEWER, Action.READ): True,
    (ADMIN, Action.QUEUE): True, (MEMBER, Action.QUEUE): True, (VIEWER, Action.QUEUE): False,
    (ADMIN, Action.QUEUE_FOR_OTHERS): True, (MEMBER, Action.QUEUE_FOR_OTHERS): False,
    (VIEWER, Action.QUEUE_FOR_OTHERS): False,
    (ADMIN, Action.CONTROL_OWN): True, (MEMBER, Action.CONTROL_OWN): True, (VIEWER, Action.CONTROL_OWN): False,
    (ADMIN, Action.CONTROL_ANY): True, (MEMBER, Action.CONTROL_ANY): False, (VIEWER, Action.CONTROL_ANY): False,
    (ADMIN, Action.USERS): True, (MEMBER, Action.USERS): False, (VIEWER, Action.USERS): False,
    (ADMIN, Action.AUDIT_OWN): True, (MEMBER, Action.AUDIT_OWN): True, (VIEWER, Action.AUDIT_OWN): True,
    (ADMIN, Action.AUDIT_ALL): True, (MEMBER, Action.AUDIT_ALL): False, (VIEWER, Action.AUDIT_ALL): False,
}


def may(role: str, action: Action) -> bool:
    """Is ``role`` allowed ``action`` (an unknown role: nothing)?"""
    return TABLE.get((role, action), False)


def _who(name: str, role: str) -> str:
    return f"{name} ({role})"


def refuse_queue(name: str, role: str, user: str) -> Optional[str]:
    """Why ``name`` may not queue a job whose ``rayjobs.user`` is ``user`` ("" or its own name:
    as itself); None if it may."""
    if not may(role, Action.QUEUE):
        return f"{_who(name, role)} may read but not queue jobs: ask an admin for a member's token"
    if user and user != name and not may(role, Action.QUEUE_FOR_OTHERS):
        return (f"{name} may queue jobs only as {name}, not as {user} (rayjobs.user={user}): drop rayjobs.user, "
                f"or ask an admin to queue it for {user}")
    return None


def refuse_control(name: str, role: str, verb: str, job_id: str, owner: str) -> Optional[str]:
    """Why ``name`` may not ``verb`` (stop, resume, rerun) job ``job_id`` of ``owner``; None if it may."""
    if not may(role, Action.CONTROL_OWN):
        return f"{_who(name, role)} may read but not {verb} jobs: ask {owner or 'its owner'} or an admin"
    if owner != name and not may(role, Action.CONTROL_ANY):
        whose = f"{owner}'s job" if owner else "a job of no recorded user"
        only = f"only {owner} or an admin" if owner else "only an admin"
        return f"{job_id} is {whose}: {only} may {verb} it"
    return None


def refuse_users(name: str, role: str) -> Optional[str]:
    """Why ``name`` may not add, list or revoke users; None if it may."""
    if may(role, Action.USERS):
        return None
    return f"{_who(name, role)} may not manage users: only an admin may add, list or revoke them"


def audit_user(name: str, role: str, asked: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """Whose audit entries ``name`` reads when it asks for ``asked`` (None: all it may see):
    ``(user filter, refusal)``. An admin reads anyone's; the others their own only."""
    if may(role, Action.AUDIT_ALL):
        return asked or None, None
    if asked and asked != name:
        return None, f"{_who(name, role)} may read only its own audit entries, not {asked}'s"
    return name, None
