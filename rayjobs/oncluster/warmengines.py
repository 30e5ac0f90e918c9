"""Kept rollout engines on the cluster (issue 50): the Ray side of :mod:`rayjobs.oncluster.warmth`.

A kept engine is a **detached** Ray actor in the namespace :data:`~rayjobs.oncluster.warmth.NAMESPACE`,
named by :func:`~rayjobs.oncluster.warmth.engine_name` (key, node, GPUs), that speaks
:class:`EngineState`'s three calls besides its own: ``info()``, ``attach(job, stack)`` and
``release(job)``. Detached, it outlives the job that built it (a job's other actors end with its
driver); named in a namespace of its own, the next job can find it (each job runs in an anonymous
namespace of its own). It holds no Ray resource: the GPU memory it keeps asleep is counted by the
queue (:class:`Registry`), not by Ray, so it never makes a job wait for Ray to place it.

* A job: :func:`attach` (the idle engine of its key on its GPUs, claimed atomically -- an actor runs
  one call at a time -- and only on the same stack) or :func:`keep_options` to build one that stays;
  at its end ``release(job)``.
* The queue: :class:`Registry` -- what is kept where (read at most every :data:`REFRESH_S`), and
  the evictions and releases its rules decide (:func:`rayjobs.oncluster.scheduler.keep_warm`).
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from importlib import metadata
from typing import Any, Optional, Sequence

from rayjobs.oncluster.warmth import NAMESPACE, WarmEngine, engine_name
from rayjobs.shared import JOB_MARK_ENV

log = logging.getLogger(__name__)

#: The queue reads the kept engines at most this often (a listing and one ``info()`` per engine).
REFRESH_S = 2.0
#: Bound on one engine's answer (an engine busy or gone is skipped, never waited for).
CALL_TIMEOUT_S = 2.0
#: The packages a kept engine and the job that attaches to it must share, versions and all.
STACK = ("verl", "vllm", "torch", "transformers", "ray")


def stack() -> str:
    """This process's stack: Python and :data:`STACK`'s versions (``-`` where one is missing)."""
    parts = [f"python {sys.version.split()[0]}"]
    for p in STACK:
        try:
            parts.append(f"{p} {metadata.version(p)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{p} -")
    return ", ".join(parts)


class EngineState:
    """The kept-engine protocol, for an engine actor class to inherit: what :class:`Registry` and
    :func:`attach` call. ``held_gib`` is what the engine holds asleep (set it after a sleep)."""

    def __init__(self, key: str, model: str, node: str, gpus: Sequence[str], job: str,
                 engine_stack: str = "") -> None:
        self.key, self.model, self.node, self.gpus = key, model, node, tuple(str(g) for g in gpus)
        self.stack = engine_stack or stack()
        self.built_by = self.attached = job
        self.idle_since = 0.0
        self.held_gib = 0.0

    def info(self) -> dict[str, Any]:
        return {"key": self.key, "model": self.model, "node": self.node, "gpus": list(self.gpus),
                "held_gib": self.held_gib, "idle_since": self.idle_since, "attached": self.attached,
                "stack": self.stack, "built_by": self.built_by}

    def attach(self, job: str, job_stack: str) -> str:
        """Claim this engine for ``job``: "" when done, else why not (held by another job, another stack)."""
        if self.attached and self.attached != job:
            return f"held by {self.attached}"
        if job_stack != self.stack:
            return f"another stack ({self.stack}; the job has {job_stack})"
        self.attached, self.idle_since = job, 0.0
        return ""

    def release(self, job: Optional[str] = None) -> bool:
        """Hand the engine back (``job``: only if that job holds it; None: whoever does)."""
        if job is not None and self.attached != job:
            return False
        self.attached, self.idle_since = "", time.time()
        return True


def keep_options(key: str, node: str, gpus: Sequence[str]) -> dict[str, Any]:
    """``ActorClass.options(**...)`` for an engine that outlives its job, findable by the next one.
    Its processes carry a job mark of their own (``RAYJOBS_JOB=warm:<name>``), not the job's: the
    reaper (:mod:`rayjobs.oncluster.reaper`) ends what an ended job left on the GPUs by that mark,
    and a kept engine is left on purpose (the queue evicts it, :class:`Registry`)."""
    name = engine_name(key, node, gpus)
    return {"name": name, "namespace": NAMESPACE, "lifetime": "detached", "get_if_exists": False,
            "runtime_env": {"env_vars": {JOB_MARK_ENV: f"warm:{name}"}}}


def find(name: str) -> Any:
    """The kept engine of that name (an actor handle), or None."""
    import ray

    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


def attach(key: str, node: str, gpus: Sequence[str], job: str, timeout: float = 30.0) -> tuple[Any, str]:
    """Claim the kept engine of ``key`` on these GPUs for ``job``: (its handle, "") or (None, why not)."""
    import ray

    if not key:
        return None, "the job uses no warm engine"
    name = engine_name(key, node, gpus)
    h = find(name)
    if h is None:
        return None, f"no kept engine {name}"
    try:
        why = ray.get(h.attach.remote(job, stack()), timeout=timeout)
    except Exception as e:  # noqa: BLE001 -- an engine that died or hangs is not attached to
        return None, f"{name} did not answer: {type(e).__name__}"
    return (h, "") if not why else (None, f"{name}: {why}")


class Registry:
    """The queue's view of the kept engines, and its hands on them (bounded calls, logged)."""

    def __init__(self, refresh_s: float = REFRESH_S) -> None:
        self.refresh_s = refresh_s
        self.engines: tuple[WarmEngine, ...] = ()
        self._at = float("-inf")
        self._seen: dict[str, float] = {}  #: name -> when first listed (the rules' "before the queue saw it")

    def look(self, now: Optional[float] = None) -> tuple[WarmEngine, ...]:
        """The kept engines (cached :attr:`refresh_s`); an engine that does not answer is left out."""
        now = time.monotonic() if now is None else now
        if now - self._at < self.refresh_s:
            return self.engines
        self._at = now
        self.engines = tuple(self._read())
        return self.engines

    def _read(self) -> list[WarmEngine]:
        import ray

        try:
            names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                     if a.get("namespace") == NAMESPACE]
        except Exception as e:  # noqa: BLE001 -- the GCS busy: keep the last view
            log.warning("warm engines not listed: %s", e)
            return list(self.engines)
        handles = {n: find(n) for n in names}
        refs = {n: h.info.remote() for n, h in handles.items() if h is not None}
        out = []
        for n, ref in refs.items():
            try:
                e = WarmEngine.from_info(n, ray.get(ref, timeout=CALL_TIMEOUT_S))
            except Exception:  # noqa: BLE001 -- dying or busy: not counted this time
                continue
            out.append(dataclasses.replace(e, seen_at=self._seen.setdefault(n, time.time())))
        self._seen = {n: t for n, t in self._seen.items() if n in refs}
        return out

    def evict(self, name: str, why: str) -> bool:
        """End a kept engine (its GPU memory goes back with its processes); False if it was gone."""
        import ray

        h = find(name)
        log.info("warm engine %s evicted: %s", name, why)
        self.engines = tuple(e for e in self.engines if e.name != name)
        if h is None:
            return False
        ray.kill(h, no_restart=True)
        return True

    def release(self, name: str, why: str) -> bool:
        """Mark a kept engine idle (its job ended without handing it back)."""
        h = find(name)
        log.info("warm engine %s released: %s", name, why)
        if h is None:
            return False
        h.release.remote(None)
        self._at = float("-inf")  # read it again at the next look
        return True
