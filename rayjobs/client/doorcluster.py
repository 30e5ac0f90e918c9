"""A cluster reached through its door only: what the laptop's commands ask a
:class:`~rayjobs.client.dashboard.Dashboard` for, answered by the door's routes.

A teammate's laptop holds the door's URL and a user's token, never the cluster's token or a route
to Ray's dashboard: :func:`rayjobs.client.connection.connect` gives this instead of a ``Dashboard``
when the target is a login (``rayjobs login``, ``RAYJOBS_URL``). The commands keep their one path:
``.queue`` is the :class:`~rayjobs.client.door.Door`; a log is read through ``GET /v1/jobs/{id}/log``
(the head reads Ray's file locally); the nodes and their use through ``GET /v1/cluster``. What
only Ray's dashboard could do (a node's log file, Ray's
Jobs SDK) fails in one line (:class:`DoorOnly`, exit 2).
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

from rayjobs.client.door import Door
from rayjobs.contract import wire
from rayjobs.contract.target import Target
from rayjobs.errors import JobNotFound, RayjobsError


class DoorOnly(RayjobsError):
    """What needs Ray's dashboard, asked of a cluster reached through its door only."""


def _needs_dashboard(what: str) -> DoorOnly:
    return DoorOnly(f"{what} needs Ray's dashboard, which a team's door does not expose; ask the cluster's owner "
                    f"(they reach it with `rayjobs connect`)")


class DoorCluster:
    """The cluster behind ``target``'s door (``target.door``), shaped as the commands use a ``Dashboard``."""

    def __init__(self, target: Target, *, timeout: float = 30.0) -> None:
        self.target = target
        self.address = str(target.address)
        self.queue = Door(self.address, target.token, target.fingerprint, timeout=timeout)
        self.queue.fold_foreign = True
        self._info: Optional[wire.ClusterInfo] = None

    @property
    def door(self) -> Door:
        """The door's client (the same object as :attr:`queue`)."""
        return self.queue

    def forget_queue(self) -> None:
        """Nothing to find again: the door is where the login says."""

    # ------------------------------------------------------------------ the cluster, once per client
    def info(self) -> wire.ClusterInfo:
        """``GET /v1/cluster``, asked once per client (a command reads it at most once)."""
        if self._info is None:
            self._info = self.queue.cluster()
        return self._info

    def version(self) -> dict[str, Any]:
        """What ``/api/version`` says on a dashboard: the head's Ray version and session."""
        i = self.info()
        return {"ray_version": i.ray_version, "session_name": i.session}

    def alive(self) -> bool:
        try:
            self.queue.health()
            return True
        except RayjobsError:
            return False

    def nodes(self) -> list[dict[str, Any]]:
        """The alive nodes as the state API's rows (``node_id``, ``node_ip``, ``is_head_node``, totals, labels)."""
        return [{"node_id": n.node_id, "node_ip": n.ip, "is_head_node": n.is_head, "state": "ALIVE",
                 "labels": dict(n.labels),
                 "resources_total": {"GPU": n.gpus, "CPU": n.cpus,
                                     **{k: v[1] for k, v in n.resources.items() if len(v) == 2}}}
                for n in self.info().nodes if n.alive]

    def resource_use(self) -> dict[str, dict[str, list[float]]]:
        """Per node id, ``{"GPU": [used, total], "CPU": [used, total], ...}``."""
        return {n.node_id: {"GPU": [n.gpus_used, n.gpus], "CPU": [n.cpus_used, n.cpus], **n.resources}
                for n in self.info().nodes if n.alive}

    # ------------------------------------------------------------------ jobs and their logs
    def list_jobs(self, *, include_own: bool = False) -> list[wire.JobView]:
        """The Ray jobs the queue does not know (``GET /v1/jobs?foreign=true``), as the door's views: those
        the queue's list just read (``all_jobs`` asks for the queue's jobs, then these), else asked now."""
        seen, self.queue.foreign_seen = self.queue.foreign_seen, None
        if seen is not None:
            return seen
        return [v for v in self.queue.views(foreign="true") if v.foreign]

    def job(self, job_id: str) -> dict[str, Any]:
        """A job's view (the queue's, or a foreign Ray job's as the door lists it)."""
        v = self.queue.job(job_id)
        if v is None:
            raise JobNotFound(f"no job {job_id!r} on the cluster; `rayjobs list` shows the ids")
        return v

    def logs(self, job_id: str) -> str:
        """A job's whole driver log."""
        return b"".join(self.queue.log(job_id)).decode("utf-8", "replace")

    def iter_log(self, job_id: str, node_id: Any = None, lines: int = -1,
                 max_bytes: Optional[int] = None) -> Iterator[bytes]:
        """A job's log as it is now (its last ``lines`` lines; -1: all), in chunks; ``node_id`` unused
        (the head knows where its driver runs)."""
        got = 0
        for chunk in self.queue.log(job_id, lines if lines >= 0 else None):
            got += len(chunk)
            if max_bytes is not None and got > max_bytes:
                raise RayjobsError(f"the log tail of {job_id} is larger than {max_bytes} bytes")
            yield chunk

    def log_tail(self, job_id: str, node_id: Any, lines: int, max_bytes: int = 32 << 20) -> bytes:
        return b"".join(self.iter_log(job_id, node_id, lines, max_bytes=max_bytes))

    def follower(self, job_id: str, **kw: Any) -> Any:
        """A follower of ``job_id``'s log through the door (:class:`~rayjobs.client.doorfollow.DoorFollower`)."""
        from rayjobs.client.doorfollow import DoorFollower

        return DoorFollower(self.queue, job_id, **kw)

    def node_file(self, node_id: str, filename: str, lines: int = 10) -> Optional[bytes]:
        """A node's log file: not through the door (None, as for a file that is not there)."""
        return None

    # ------------------------------------------------------------------ what only Ray's dashboard does
    def stop(self, job_id: str) -> bool:
        """Stop a Ray job the queue does not know (the door lets an admin only; a refusal is its one line)."""
        self.queue.call("POST", f"/jobs/{job_id}/stop")
        return True

    def submit(self, kwargs: Any) -> str:
        raise _needs_dashboard("submitting to Ray's Jobs API directly")

    def get(self, path: str, *args: Any, **kwargs: Any) -> Any:
        raise _needs_dashboard(f"GET {path}")

    def get_json(self, path: str, *args: Any, **kwargs: Any) -> Any:
        raise _needs_dashboard(f"GET {path}")
