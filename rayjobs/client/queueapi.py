"""The laptop's client of the queue's HTTP API on the head (:mod:`rayjobs.door.app`).

Reached through the cluster's :class:`rayjobs.client.dashboard.Dashboard` (``d.queue``), which it
reads the head's files with (``d`` below; not imported here: the dashboard imports this module).

Where the API is: the target's ``api`` URL (a tunnel's local port, the embedded head's record,
``$RAYJOBS_API_ADDRESS``), else the head says it: the queue writes its port into this Ray session's
log dir (:data:`rayjobs.contract.wire.API_FILE`), read through the dashboard's log API, on the
dashboard's host. A cluster whose queue is not running (its head's Ray was restarted by hand) gets
it started: one small Ray job of ``python3 -m rayjobs.door.host start``, the only
request that still goes through Ray's Jobs API. Every call is bounded in time; a refusal is the
server's one line as a :class:`~rayjobs.errors.RayjobsError` (exit 2).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence
from urllib.parse import urlsplit

from rayjobs.contract import wire
from rayjobs.contract.status import Status
from rayjobs.errors import ClusterUnreachable, ConfigError, NoSuchJob, RayjobsError, SubmitError, short_reason
from rayjobs.shared import ROLE_KEY

#: An explicit queue API URL (a tunnel set up by hand, a test): wins over discovery.
ADDRESS_ENV = "RAYJOBS_API_ADDRESS"
#: How long a command waits for a queue it started (or one coming back with the head) to answer.
START_TIMEOUT_S = 90.0


class QueueDown(ClusterUnreachable):
    """The queue's API does not answer (not started in this Ray session, or restarting)."""


def _error(status: int, text: str) -> RayjobsError:
    try:
        msg = str(json.loads(text).get("error") or text)
    except (ValueError, AttributeError):
        msg = " ".join(text.split())[:300]
    if status == 404:
        return NoSuchJob(msg)
    if status in (401, 403):
        return ClusterUnreachable(msg)
    if status in (409, 410, 507):
        return SubmitError(msg)
    if status >= 500:
        return ClusterUnreachable(f"the cluster's queue failed: {msg}")
    return ConfigError(msg)


def _parsed(cls: type, doc: Any) -> Any:
    """An answer as its wire class (fields it does not declare are dropped); one line if it is none."""
    try:
        return wire.from_json(cls, doc)
    except ValueError as e:
        raise ClusterUnreachable(f"the cluster's queue answered something else than a {cls.__name__} ({e}): "
                                 f"is its rayjobs another version? (`rayjobs cluster` shows both)") from None


class QueueAPI:
    """The queue API at ``url`` (``http://127.0.0.1:8263``) with the cluster's ``token``."""

    def __init__(self, url: str, token: Optional[str], *, timeout: float = 30.0) -> None:
        import requests

        self.url = url.rstrip("/")
        self.timeout = timeout
        self._http = requests.Session()
        self._http.trust_env = False  # loopback or a tunnel: no proxy in between
        if token:
            self._http.headers["Authorization"] = f"Bearer {token}"

    def call(self, method: str, path: str, *, body: Any = None, params: Any = None, data: Any = None,
             headers: Optional[dict[str, str]] = None, ok: Sequence[int] = (200, 201)) -> Any:
        """One request; its JSON answer.

        Raises:
            QueueDown: nothing answers. RayjobsError: the queue refused (its one line).
        """
        import requests

        try:
            r = self._http.request(method, self.url + wire.PREFIX + path, json=body, params=params, data=data,
                                   headers=headers, timeout=(5.0, self.timeout))
        except requests.exceptions.SSLError as e:
            raise self.tls_refused(e) from e
        except requests.RequestException as e:
            raise QueueDown(f"the cluster's queue at {self.url} does not answer ({short_reason(e)})") from e
        if r.status_code not in ok:
            raise self.error_of(r.status_code, r.text)
        return r.json() if r.content else None

    def error_of(self, status: int, text: str) -> RayjobsError:
        """The one-line error for an answer of ``status`` (the server's own line)."""
        return _error(status, text)

    def tls_refused(self, e: BaseException) -> RayjobsError:
        """The one line for a TLS handshake that failed (a pinned door says more: :mod:`rayjobs.client.door`)."""
        return QueueDown(f"the cluster's queue at {self.url} does not answer over TLS ({short_reason(e)})")

    # ------------------------------------------------------------------ the routes
    def health(self) -> wire.Health:
        return wire.from_json(wire.Health, self.call("GET", "/health"))

    def enqueue(self, req: wire.EnqueueRequest) -> wire.EnqueueReply:
        return wire.from_json(wire.EnqueueReply, self.call("POST", "/jobs", body=wire.to_json(req)))

    def views(self, **filters: Any) -> list[wire.JobView]:
        """Every job passing ``filters`` (``sweep``, ``status`` list, ``user``, ``experiment``, ``since``),
        oldest first, all pages."""
        params = {k: v for k, v in filters.items() if v not in (None, (), [])}
        out: list[wire.JobView] = []
        cursor: Optional[str] = None
        for _ in range(10_000):  # bounded: 10,000 pages of up to 100,000 jobs
            page = self.call("GET", "/jobs", params=dict(params, limit=100_000, **({"cursor": cursor} if cursor else {})))
            out += [_parsed(wire.JobView, v) for v in page["jobs"]]
            cursor = page.get("next")
            if not cursor:
                break
        return out

    def jobs(self, **filters: Any) -> list[dict[str, Any]]:
        """:meth:`views` as plain dicts (declared fields only), for callers that keep JSON (tests,
        scripts, the door's follower); the views read :meth:`views`."""
        return [wire.to_json(v) for v in self.views(**filters)]

    def view(self, job_id: str) -> Optional[wire.JobView]:
        """One job's view, or None if the queue has no record of it."""
        try:
            return _parsed(wire.JobView, self.call("GET", f"/jobs/{job_id}"))
        except NoSuchJob:
            return None

    def job(self, job_id: str) -> Optional[dict[str, Any]]:
        """:meth:`view` as a plain dict (declared fields only), or None; the views read :meth:`view`."""
        v = self.view(job_id)
        return None if v is None else wire.to_json(v)

    def stop(self, ids: Sequence[str], *, mode: str = "now", timeout_s: float = 3600.0) -> list[wire.StopOutcome]:
        doc = self.call("POST", "/jobs/stop", body={"ids": list(ids), "mode": mode, "timeout_s": float(timeout_s)})
        return [wire.from_json(wire.StopOutcome, o) for o in doc["results"]]

    def resume(self, job_id: str, new_id: Optional[str] = None) -> wire.JobView:
        return _parsed(wire.JobView, self.call("POST", f"/jobs/{job_id}/resume", body={"new_id": new_id}))

    def summary(self) -> wire.QueueSummary:
        return _parsed(wire.QueueSummary, self.call("GET", "/queue"))

    def usage(self, **filters: Any) -> wire.UsageReply:
        """``GET /v1/usage`` (``user``, ``sweep``, ``since``: epoch s)."""
        return _parsed(wire.UsageReply, self.call("GET", "/usage", params={k: v for k, v in filters.items() if v is not None}))

    def cluster(self) -> wire.ClusterInfo:
        """``GET /v1/cluster``: the nodes, their use and versions as the head reads them."""
        return wire.from_json(wire.ClusterInfo, self.call("GET", "/cluster"))

    def has_code(self, key: str) -> bool:
        try:
            self.call("GET", f"/code/{key}")
            return True
        except NoSuchJob:
            return False

    def put_code(self, key: str, archive: Path, say: Optional[Callable[[str], None]] = None) -> None:
        """Upload a code archive (streamed; a long one says how far it is, on ``say``)."""
        size = archive.stat().st_size
        with open(archive, "rb") as f:
            body = _Progress(f, size, say) if say else f
            self.call("PUT", f"/code/{key}", data=body, headers={"Content-Type": "application/zip"})


class _Progress:
    """A file read in chunks, saying every second how much of it went up (an upload over a second)."""

    def __init__(self, f: Any, size: int, say: Callable[[str], None]) -> None:
        self.f, self.size, self.say = f, size, say
        self.sent, self.start, self.said = 0, time.monotonic(), time.monotonic()

    def __len__(self) -> int:  # requests sends a Content-Length, not chunks
        return self.size

    def __iter__(self) -> Any:
        while True:
            chunk = self.f.read(1 << 20)
            if not chunk:
                return
            self.sent += len(chunk)
            if time.monotonic() - self.said >= 1.0:
                self.said = time.monotonic()
                self.say(f"uploading the code: {self.sent >> 20} of {self.size >> 20} MiB")
            yield chunk


# --------------------------------------------------------------------------- finding it
def _head_file(d: Any) -> Optional[dict[str, Any]]:
    """The queue's API file in the head's log dir (this Ray session's), or None."""
    try:
        head = next((r["node_id"] for r in d.nodes() if r.get("is_head_node")), "")
        body = d.node_file(head, wire.API_FILE, 5) if head else None
        return json.loads(body.decode().strip().splitlines()[-1]) if body and body.strip() else None
    except (RayjobsError, ValueError, IndexError, KeyError):
        return None


def head_session(d: Any) -> Optional[str]:
    """The Ray session the head runs now (asked afresh: a client may outlive a restart of its head),
    or None if the dashboard does not say."""
    try:
        return str(d.get_json("/api/version").get("session_name") or "") or None
    except (RayjobsError, AttributeError, TypeError):
        return None


def _discovered(d: Any, session: Optional[str] = None) -> Optional[str]:
    doc = _head_file(d)
    if not doc or not doc.get("port"):
        return None
    if session and doc.get("session") and doc["session"] != session:
        return None  # an earlier Ray session's queue wrote it: not this head's
    host = urlsplit(d.address).hostname or "127.0.0.1"
    return f"http://{host}:{int(doc['port'])}"


def start_queue(d: Any) -> str:
    """Start the cluster's queue (it reloads its backlog from the store): one small Ray job; its id."""
    sid = f"rayjobs-queue-start-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    d.submit({"entrypoint": "python3 -m rayjobs.door.host start", "submission_id": sid,
              "entrypoint_num_cpus": 0, "metadata": {ROLE_KEY: "queue starter"}})
    return sid


def start_refused(d: Any, sid: str) -> Optional[str]:
    """The starter job's last line if it failed (the queue refused to start: its store is another
    live queue's, say), else None -- also where the dashboard cannot say (the wait goes on)."""
    try:
        if Status.of(d.job(sid).get("status")) != Status.FAILED:
            return None
        lines = [ln.strip() for ln in d.logs(sid).splitlines() if ln.strip()]
    except Exception:  # noqa: BLE001
        return None
    return lines[-1][:500] if lines else None


def connect_queue(d: Any, *, start: bool = True, timeout: float = START_TIMEOUT_S) -> QueueAPI:
    """The queue API of ``d``'s cluster, answering (started first if it runs nowhere, ``start``).

    Raises:
        QueueDown: it does not answer within ``timeout`` s (one line, what to check).
    """
    fixed = d.target.api or os.environ.get(ADDRESS_ENV)
    deadline = time.monotonic() + timeout
    started, asked = "", 0.0
    last = ""
    for _ in range(100_000):  # bounded by the deadline
        # A queue counts only if it runs in the head's Ray session now: the file or port of a head
        # stopped and started again may still name (or reach) the queue of the session before.
        session = head_session(d)
        url = fixed or _discovered(d, session)
        if url:
            q = QueueAPI(url, d.target.token)
            try:
                h = q.health()
                if not session or not h.session or h.session == session:
                    return q
                last = (f"the queue at {url} runs in Ray session {h.session}, not in the head's {session} "
                        "(the queue of a head that was stopped)")
            except QueueDown as e:
                last = str(e)
        if not start or time.monotonic() >= deadline:
            break
        if not started:
            started = start_queue(d)
        elif time.monotonic() - asked >= 1.0:  # a starter that failed says why at once, not at the deadline
            asked = time.monotonic()
            refused = start_refused(d, started)
            if refused:
                raise QueueDown(f"the cluster's queue did not start: {refused}")
        time.sleep(0.2)
    why = last or f"the head names no queue API in this Ray session (no {wire.API_FILE} in its log dir)"
    raise QueueDown(f"{why}; check `rayjobs cluster` and the queue actor's log on the head, then try again")


def queue_jobs(q: QueueAPI, specs: Sequence[dict[str, Any]], runtime_env: Optional[dict[str, Any]], *,
               code_of: Optional[str] = None, say: Optional[Callable[[str], None]] = None) -> list[str]:
    """Queue jobs (``submit_job`` requests) with the code of ``runtime_env['working_dir']`` -- uploaded
    once per content, and only if the cluster lacks it -- or with job ``code_of``'s snapshot (a rerun:
    nothing is uploaded); a spec's own ``code_of`` metadata (an evaluation) names its point's. All or
    none; returns their ids once the queue holds them on disk.

    Raises:
        SubmitError, ConfigError: the queue refused them (its one line); nothing is queued.
    """
    from rayjobs.client import codepack
    from rayjobs.shared import CODE_OF_KEY

    jobs = []
    for s in specs:
        env = {k: v for k, v in dict(s.get("runtime_env") or {}).items() if k not in ("working_dir", "excludes")}
        fields = {k: v for k, v in s.items() if k not in ("runtime_env",)}
        jobs.append(wire.JobSubmit(**fields, runtime_env=env, code_of=(s.get("metadata") or {}).get(CODE_OF_KEY)))
    key = None
    if not code_of and not all(j.code_of for j in jobs):
        env = dict(runtime_env or {})
        try:
            key, archive = codepack.pack(str(env["working_dir"]), list(env.get("excludes") or []))
            if not q.has_code(key):
                q.put_code(key, archive, say)
        finally:
            codepack.forget()
    reply = q.enqueue(wire.EnqueueRequest(jobs=jobs, code=key, code_of=code_of))
    return list(reply.ids)
