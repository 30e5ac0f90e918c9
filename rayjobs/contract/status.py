"""A job's status, as every view shows it, and a queue record's state."""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    """What ``rayjobs list``/``status`` say of a job: Ray's statuses, plus ``QUEUED`` (the rayjobs
    queue holds it) and ``UNKNOWN`` (only the local record knows it: the cluster forgot it)."""

    PENDING = "PENDING"
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    UNKNOWN = "UNKNOWN"

    def __str__(self) -> str:
        return self.value

    @property
    def terminal(self) -> bool:
        return self.value in TERMINAL

    @classmethod
    def of(cls, value: object) -> "Status":
        """``"RUNNING"``, ``JobStatus.RUNNING`` or ``"JobStatus.RUNNING"`` -> :attr:`RUNNING`;
        anything else -> :attr:`UNKNOWN`."""
        try:
            return cls(word(value).upper())
        except ValueError:
            return cls.UNKNOWN


def word(value: object, default: str = "") -> str:
    """Ray's status as the word users see, read in this one place: ``JobStatus.RUNNING``,
    ``"JobStatus.RUNNING"`` or ``"RUNNING"`` -> ``"RUNNING"``; None or empty -> ``default``. A word
    this version does not know stays as it came (a newer Ray's status is shown, not hidden)."""
    text = str(getattr(value, "value", value) or "")
    return text.split(".")[-1] if text else default


#: The statuses that never change again.
TERMINAL: tuple[str, ...] = (Status.SUCCEEDED.value, Status.FAILED.value, Status.STOPPED.value)
#: The statuses of a job Ray has and that has not ended (it starts, or runs).
IN_RAY: tuple[str, ...] = (Status.PENDING.value, Status.RUNNING.value)
#: The statuses of a job that has not started running (no attempt yet).
NOT_STARTED: tuple[str, ...] = (Status.PENDING.value, Status.QUEUED.value)
#: Every status, in the order a user meets them.
STATUSES: tuple[str, ...] = tuple(s.value for s in Status)


class State(str, Enum):
    """Where a record is in the queue: ``waiting`` (no Ray job yet), ``admitted`` (its Ray job was
    submitted: the trainer starts, or runs), ``done`` (it ended; its status says how)."""

    WAITING = "waiting"
    ADMITTED = "admitted"
    DONE = "done"

    def __str__(self) -> str:
        return self.value
