"""What the laptop asks of the queue -- queue jobs, stop them, resume one, upload code -- checked
whole before anything changes, then made durable before it is answered.

Every refusal is a :class:`RequestError`: one line, what was wrong and what to do, with the HTTP
status the API answers with (:mod:`rayjobs.door.app`). Runs on the queue loop's thread
(the durable writes of a big request in a worker thread: :meth:`QueueRequests.write`).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from rayjobs.contract import ids as idres
from rayjobs.contract.record import JobRecord
from rayjobs.contract.status import State, Status
from rayjobs.contract.wire import (CODE_KEY_RE, MAX_CODE_BYTES, EnqueueRequest, JobSubmit, StopOutcome, code_key)
from rayjobs.oncluster.checkpointwatch import ask_stop

#: A job id names its record file: letters, digits and ``_.+=,@:-``, not starting with a dot.
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+=,@:-]{0,199}$")
MAX_JOBS = 20_000  #: jobs per request


class RequestError(Exception):
    """A refused request: ``status`` is its HTTP status, the message one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class QueueRequests:
    """The laptop's requests, on the queue service ``svc``."""

    def __init__(self, svc: Any) -> None:
        self.svc = svc
        self._pending: set[str] = set()  #: ids of a request being written (a retried one sees them)

    # ---------------------------------------------------------------- queue jobs
    def plan(self, req: EnqueueRequest, now: Optional[float] = None) -> tuple[list[JobRecord], list[str]]:
        """The new records of ``req`` and the ids the queue has already (all checked first).

        Raises:
            RequestError: one job or the code is wrong: nothing is queued.
        """
        now = time.time() if now is None else now
        if not req.jobs:
            raise RequestError(422, "jobs: give at least one job")
        if len(req.jobs) > MAX_JOBS:
            raise RequestError(413, f"jobs: {len(req.jobs)} in one request, at most {MAX_JOBS}: split the sweep")
        seen: set[str] = set()
        for i, job in enumerate(req.jobs):
            self._check_job(i, job, seen)
        known = set(self.svc.records) | self._pending
        new = [j for j in req.jobs if j.submission_id not in known]
        keys = {j.submission_id: self._code_of(req, j) for j in new}
        after = self._after(new, seen)
        recs = [JobRecord(id=j.submission_id, state=State.WAITING, spec=_spec(j, after.get(j.submission_id)),
                          code=keys[j.submission_id], queued_at=now) for j in new]
        return recs, [j.submission_id for j in req.jobs if j.submission_id in known]

    def _check_job(self, i: int, job: JobSubmit, seen: set[str]) -> None:
        where = f"jobs[{i}]"
        if not ID_RE.match(job.submission_id or ""):
            raise RequestError(422, f"{where}.submission_id={job.submission_id!r}: an id is 1-200 letters, digits or "
                                    f"_.+=,@:- and does not start with a dot")
        if job.submission_id in seen:
            raise RequestError(422, f"{where}.submission_id={job.submission_id!r} is in the request twice")
        seen.add(job.submission_id)
        if not job.entrypoint.strip():
            raise RequestError(422, f"{where}.entrypoint is empty: give the command the job runs")
        if "working_dir" in (job.runtime_env or {}):
            raise RequestError(422, f"{where}.runtime_env.working_dir: the code travels as a snapshot "
                                    f"(PUT /v1/code/{{key}}, then the request's \"code\"), not in the runtime_env")

    def _code_of(self, req: EnqueueRequest, job: JobSubmit) -> str:
        """The code key a new job runs with (its own ``code_of``, the request's, or its ``code``)."""
        src = job.code_of or req.code_of
        if src:
            try:
                return self.svc.store.code_of(src)
            except LookupError as e:
                raise RequestError(404 if "no record" in str(e) else 410, str(e)) from None
        if not req.code:
            raise RequestError(422, "code: name the job's code snapshot (upload it with PUT /v1/code/{key}) or code_of")
        if not self.svc.store.has_code(req.code):
            raise RequestError(409, f"code {req.code} is not on the cluster: upload it first (PUT /v1/code/{req.code})")
        return req.code

    def _after(self, new: list[JobSubmit], ids_here: set[str]) -> dict[str, list[str]]:
        """Each new job's ``after`` (ids as typed: an id, the start of one, a sweep id) as job ids."""
        wanted = {j.submission_id: json.loads(j.metadata.get("after") or "[]") for j in new if j.metadata.get("after")}
        if not wanted:
            return {}
        known = {i: r.metadata for i, r in self.svc.records.items()}
        known.update({j.submission_id: j.metadata for j in new})
        sweeps = idres.sweeps_of(known)
        out = {}
        for job_id, tokens in wanted.items():
            got: list[str] = []
            for token in tokens:
                try:
                    got += idres.resolve(str(token), known, sweeps, what="job or sweep")
                except LookupError as e:
                    raise RequestError(422, f"rayjobs.after={token}: {e}") from None
            out[job_id] = sorted(dict.fromkeys(got))
        return out

    def write(self, recs: list[JobRecord]) -> list[JobRecord]:
        """(in a worker thread) Write the records durably, all or none.

        Raises:
            RequestError: a write failed (disk full, the storage root gone): none is kept.
        """
        done: list[JobRecord] = []
        try:
            for rec in recs:
                done.append(self.svc.store.put(rec))
        except OSError as e:
            for rec in done:
                self.svc.store.remove(rec.id)
            raise RequestError(507, f"could not write the queue's records ({e.strerror or e}): "
                                    f"check the storage root {self.svc.store.root}") from None
        return done

    def reserve(self, recs: list[JobRecord]) -> None:
        self._pending |= {r.id for r in recs}

    def commit(self, recs: list[JobRecord]) -> None:
        """(on the loop) The written records join the line."""
        for rec in recs:
            self._pending.discard(rec.id)
            self.svc.records[rec.id] = rec
            self.svc.state.queue(rec)
            self.svc.note("queued", rec.id)

    def release(self, recs: list[JobRecord]) -> None:
        self._pending -= {r.id for r in recs}

    # ---------------------------------------------------------------- stop
    def stop(self, ids: list[str], mode: str, timeout_s: float, now: Optional[float] = None) -> list[StopOutcome]:
        """Stop each job (all checked first: an unknown id, or ``checkpoint`` for a running job that
        saves none, refuses the whole request)."""
        now = time.time() if now is None else now
        st = self.svc.state
        for job_id in ids:
            if job_id not in self.svc.records and not st.holds(job_id):
                raise RequestError(404, f"no job {job_id!r} in the queue; `rayjobs list` shows the ids")
        if mode == "checkpoint":
            if timeout_s <= 0:
                raise RequestError(422, f"timeout_s={timeout_s:g}: give a positive number of seconds")
            for job_id in ids:
                r = st.running.get(job_id)
                if r is not None and not (r.rec.meta.run_dir and r.rec.meta.checkpoint_dir):
                    raise RequestError(409, f"{job_id} has no checkpoint dir rayjobs knows: stop it without --at-checkpoint")
        return [self._stop_one(job_id, mode, timeout_s, now) for job_id in dict.fromkeys(ids)]

    def _stop_one(self, job_id: str, mode: str, timeout_s: float, now: float) -> StopOutcome:
        svc, st = self.svc, self.svc.state
        if job_id in st.waiting:
            w = st.take(job_id)
            svc.standby.cancel(job_id)
            st.calm_until = now + 2.0
            why = ("stopped while waiting to resume after a preemption" if w.rec.preempted
                   else "stopped while queued: it never started")
            svc.finish(w.rec, Status.STOPPED, why)
            return StopOutcome(job_id, "cancelled", Status.STOPPED, why)
        r = st.running.get(job_id) or st.ending.get(job_id)
        if r is None:
            rec = svc.records[job_id]
            return StopOutcome(job_id, "ended", str(rec.status or Status.UNKNOWN), f"{job_id} already {rec.status}")
        r.stop_asked = True
        st.version += 1
        if job_id in st.ending:  # stopped for a preemption already: it ends, not back in line
            return StopOutcome(job_id, "stopping", Status.STOPPED, "it has stopped; it ends there")
        r.rec = svc._put(r.rec.with_(stop_asked=True))
        if mode == "checkpoint":
            ask_stop(Path(r.rec.meta.run_dir), job_id, timeout_s)
            return StopOutcome(job_id, "at_checkpoint", Status.RUNNING,
                               f"it stops once its next checkpoint is saved (at most {timeout_s:g} s)")
        if r.in_ray:  # (not yet in Ray: it is stopped as soon as its submit returns)
            svc.after_written(svc.jobs.stop, job_id)
        return StopOutcome(job_id, "stopping", str(r.ray.get("status") or Status.PENDING),
                           "SIGTERM, then the head's grace period to save")

    # ---------------------------------------------------------------- resume
    def plan_resume(self, old: str, new_id: Optional[str], now: Optional[float] = None, *,
                    queued_by: str = "") -> tuple[JobRecord, bool]:
        """The record of ``old`` resumed as a new job (``<old>-r<k>``; its owner ``old``'s, queued by
        ``queued_by``), and whether it is new (a retried request finds it queued already).

        Raises:
            RequestError: no such job; not ended; SUCCEEDED; no checkpoint; its code snapshot gone.
        """
        now = time.time() if now is None else now
        rec = self.svc.records.get(old)
        if rec is None:
            raise RequestError(404, f"no job {old!r} in the queue; `rayjobs list` shows the ids")
        if not rec.done:
            raise RequestError(409, f"{old} is {Status.QUEUED if rec.state == State.WAITING else Status.RUNNING}: only a stopped "
                                    f"or failed job can be resumed (rayjobs stop {old} first)")
        if rec.status == Status.SUCCEEDED:
            raise RequestError(409, f"{old} SUCCEEDED: nothing to resume (`rayjobs rerun {old}` trains it again)")
        if not rec.meta.checkpoint_dir:
            raise RequestError(409, f"{old} is not a verl job submitted through rayjobs (no checkpoint dir): "
                                    f"`rayjobs rerun {old}` runs it again")
        if rec.checkpoint_step is None:
            raise RequestError(409, f"{old} saved no checkpoint to resume from (trainer.save_freq): "
                                    f"`rayjobs rerun {old}` trains it again from step 0")
        if not self.svc.store.has_code(rec.code):
            raise RequestError(410, f"the code snapshot of {old} is gone (kept RAYJOBS_CODE_RETENTION_S after a job "
                                    f"ends): submit it again from its source")
        live = next((r for r in self.svc.records.values() if r.meta.resumed_from == old and not r.done), None)
        if live is not None:  # resumed already (a retried request): one run has one trainer
            return live, False
        new = new_id or next(f"{old}-r{k}" for k in range(1, 10_000) if f"{old}-r{k}" not in self.svc.records)
        if new in self.svc.records or not ID_RE.match(new):
            raise RequestError(409, f"{new} exists already or is no valid id: give another new_id")
        submitted = datetime.fromtimestamp(now).astimezone().isoformat(timespec="milliseconds")
        meta = rec.meta.with_(resumed_from=old, submitted_at=submitted, queued_by=queued_by or rec.meta.queued_by)
        spec = dict(rec.spec, submission_id=new, metadata=meta.to_ray())
        return JobRecord(id=new, state=State.WAITING, spec=spec, code=rec.code, queued_at=now), True

    # ---------------------------------------------------------------- code
    def put_code(self, key: str, archive: Path) -> bool:
        """(in a worker thread) Keep the uploaded archive as snapshot ``key``; False if it was there.

        Raises:
            RequestError: a bad key, an archive too big, not the content the key names, not a zip.
        """
        if not re.match(CODE_KEY_RE, key):
            raise RequestError(422, f"code key {key!r}: expected z + 32 hex digits (the sha256 of the archive)")
        if self.svc.store.code_wanted(key):
            return False
        size = archive.stat().st_size
        if size > MAX_CODE_BYTES:
            raise RequestError(413, f"the code archive is {size >> 20} MiB, over {MAX_CODE_BYTES >> 20} MiB: exclude "
                                    f"large files (.gitignore or rayjobs.excludes)")
        digest = hashlib.sha256()
        with open(archive, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        if code_key(digest.hexdigest()) != key:
            raise RequestError(422, f"the archive's sha256 gives {code_key(digest.hexdigest())}, not {key}: "
                                    f"the upload was cut or changed; send it again")
        try:
            self.svc.store.keep_zip(key, archive)
        except ValueError as e:
            raise RequestError(422, str(e)) from None
        return True


def _spec(job: JobSubmit, after: Optional[list[str]]) -> dict[str, Any]:
    """A job's ``submit_job`` request as the record keeps it (Nones dropped, ``after`` resolved)."""
    spec = {k: v for k, v in asdict(job).items() if v is not None and k != "code_of"}
    if after is not None:
        spec["metadata"] = dict(spec["metadata"], after=json.dumps(after))
    return spec
