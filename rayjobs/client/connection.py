"""From an address to a :class:`~rayjobs.client.dashboard.Dashboard`: the one way rayjobs connects.

The address comes by the precedence of :func:`rayjobs.settings.resolve_target`; when it is the
embedded local head and that head is not running, a command that needs it (submit, stop, resume,
rerun) starts it, saying so in one line; a read (``list``, ``status``, ``logs`` ...) does not:
:class:`LocalHeadDown` lets it answer from the local record at once.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

from rayjobs import settings
from rayjobs.client.dashboard import Dashboard, DashboardDown, unreachable_message
from rayjobs.errors import ClusterUnreachable

#: How a read's one line ends while the embedded head is down.
START_HINT = "`rayjobs local start` starts it"


class LocalHeadDown(ClusterUnreachable):
    """The embedded local head is the target and is not running; a read does not start it."""

    def __init__(self) -> None:
        super().__init__(f"the embedded local head is not running; {START_HINT}")


def connect(address: Optional[str] = None, *, address_from: str = "--address", quiet: bool = True,
            start: bool = True) -> Any:
    """A client of the cluster at ``address`` (or the one the settings name), reachable and authorised.

    Args:
        address: a dashboard URL or ``host:port``; None for the settings' precedence.
        address_from: where ``address`` was set (``--address``, ``rayjobs.address``), for messages.
        quiet: do not say on stderr that a running embedded local head is used.
        start: start the embedded local head if it is the target and not running (said on stderr
            in one line, whatever ``quiet``); False (a read): raise :class:`LocalHeadDown` instead.

    Returns:
        The :class:`Dashboard`, its dashboard known to answer (the Jobs SDK is made on first use); for
        a team's door (``rayjobs login``), a :class:`~rayjobs.client.doorcluster.DoorCluster` (the same
        calls, through the door only).

    Raises:
        ClusterUnreachable: nothing answers there, or it refuses our token (one line, what to run);
        :class:`LocalHeadDown`, with ``start`` False, for a stopped embedded head.
    """
    target = settings.resolve_target(address, address_from)
    if target.door:
        return _door(target)
    if target.embedded:
        target = _local_head(quiet, start)
    d = Dashboard(target)
    # Connect now, so an unreachable cluster fails here in one line: one GET of /api/version (what
    # the SDK's constructor asks too), not the SDK itself, whose import is ~1 s of a `rayjobs list`.
    try:
        d.version()
    except DashboardDown as e:
        raise ClusterUnreachable(unreachable_message(target, e)) from e
    return d


def _door(target: settings.Target) -> Any:
    """The cluster behind a team's door (a login): its client, the door known to answer our token."""
    from rayjobs.client.doorcluster import DoorCluster

    d = DoorCluster(target)
    d.queue.health()  # one GET now: a door that is down, a pin that fails, a token refused -> one line here
    return d


def _local_head(quiet: bool, start: bool) -> settings.Target:
    """The embedded head's target: the running one, or -- ``start`` -- one started now, said once."""
    from rayjobs.client import embedded

    if embedded.running() is None:
        if not start:
            raise LocalHeadDown()
        if os.environ.get(embedded.NO_LOCAL_ENV, "").strip() in ("", "0"):  # else ensure says why it may not
            print("rayjobs: the embedded local head is not running: starting it (about 10 s; `rayjobs local stop` "
                  "stops it)", file=sys.stderr, flush=True)
        return embedded.ensure(quiet=True)
    return embedded.ensure(quiet=quiet)
