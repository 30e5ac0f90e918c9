"""The metadata a rayjobs job carries: typed here, ``str -> str`` in Ray (``submit_job(metadata=)``).

Every key is parsed in one place, :meth:`JobMeta.from_ray`, leniently (a job from an older
rayjobs, or a value typed by hand, gives the field's default rather than an error), and written
in one, :meth:`JobMeta.to_ray`. Keys this version does not know are kept as they came
(:attr:`JobMeta.extra`), so a record round-trips whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Mapping, Optional

if TYPE_CHECKING:
    from rayjobs.contract.halving import Halving

#: The key Ray's job supervisor adds to the metadata a driver gets: the job's submission id.
RAY_ID_KEY = "job_submission_id"
#: Keys that hold JSON lists in Ray's metadata.
_JSON_LISTS = ("overrides", "sweep_overrides", "after", "gpu_groups")
#: Keys written as "1"/"0".
_FLAGS = ("git_dirty", "preemptible")
#: Optional keys: absent from Ray's metadata while empty (a job without them has none).
_OPTIONAL = ("after", "resumed_from", "rerun_of", "code_of", "eval_of", "admitted_at", "waited_s",
             "admission_note", "lost_runs", "halving", "queued_by")


@dataclass(frozen=True)
class JobMeta:
    """A job's metadata. The submit side sets the first group; the queue adds the admission's keys
    when it hands the job to Ray (the runner logs them)."""

    rayjobs: str = ""  #: rayjobs' version that submitted it
    experiment: str = ""
    kind: str = "verl"  #: ``verl`` (verl's trainer) or ``command`` (any entrypoint)
    overrides: tuple[str, ...] = ()  #: the user's overrides, as typed
    sweep: str = ""  #: the sweep id of a sweep point
    sweep_overrides: tuple[str, ...] = ()  #: the overrides that vary across the sweep
    priority: int = 0
    max_retries: int = 0
    user: str = ""
    preemptible: bool = False
    preempt_wait_s: float = 900.0
    after: tuple[str, ...] = ()  #: jobs (ids, or sweep ids as typed) that must SUCCEED first
    git_sha: str = ""
    git_dirty: bool = False
    config_hash: str = ""
    submitted_at: str = ""  #: ISO 8601 with the submitter's offset, to the millisecond
    run: str = ""  #: verl's trainer.experiment_name: a resume keeps it
    run_dir: str = ""  #: where the run's metrics files and requests live (:mod:`rayjobs.contract.paths`)
    checkpoint_dir: str = ""  #: verl's trainer.default_local_dir
    gpu_groups: tuple[int, ...] = ()  #: the GPUs of each placement group verl asks for, one node each
    resumed_from: str = ""
    rerun_of: str = ""
    code_of: str = ""  #: the job whose code snapshot this one runs
    eval_of: str = ""  #: the training job an evaluation evaluates
    halving: str = ""  #: successive halving settings of a sweep point (JSON), empty: none
    queued_by: str = ""  #: the identity the door let queue it (an admin may queue for another ``user``)
    # set by the queue at admission
    admitted_at: str = ""  #: a log stamp (:func:`rayjobs.shared.stamp`)
    waited_s: str = ""
    admission_note: str = ""
    lost_runs: int = 0
    extra: Mapping[str, str] = field(default_factory=dict)  #: keys this version does not know

    # ------------------------------------------------------------------ derived
    @property
    def gpus(self) -> int:
        return sum(self.gpu_groups)

    @property
    def halving_spec(self) -> Optional["Halving"]:
        """The sweep's successive halving settings (None: the job is not halved)."""
        from rayjobs.contract.halving import Halving

        return Halving.from_json(self.halving)

    @property
    def submission_id(self) -> str:
        """The job's Ray id, as Ray's job supervisor adds it to the metadata the driver gets
        (``RAY_JOB_CONFIG_JSON_ENV_VAR``; a key of Ray's, not written by rayjobs: kept in :attr:`extra`)."""
        return str(self.extra.get(RAY_ID_KEY, ""))

    def submitted_ts(self) -> float:
        """``submitted_at`` as epoch seconds (0.0 when absent or unreadable)."""
        try:
            return datetime.fromisoformat(self.submitted_at).timestamp()
        except (TypeError, ValueError):
            return 0.0

    # ------------------------------------------------------------------ Ray's form
    @classmethod
    def from_ray(cls, metadata: Optional[Mapping[str, Any]]) -> "JobMeta":
        """Parse Ray's metadata (lenient: an unreadable value is the field's default)."""
        raw = {k: v for k, v in dict(metadata or {}).items() if v is not None}  # None: not given
        kw: dict[str, Any] = {}
        for f in fields(cls):
            if f.name == "extra" or f.name not in raw:
                continue
            kw[f.name] = _parse(f.name, raw.pop(f.name), f.default)
        return cls(**kw, extra={str(k): str(v) for k, v in raw.items()})

    def to_ray(self) -> dict[str, str]:
        """Ray's ``str -> str`` metadata (what :meth:`from_ray` reads back)."""
        out: dict[str, str] = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            v = getattr(self, f.name)
            if f.name in _OPTIONAL and v in ("", (), 0):
                continue
            out[f.name] = _format(f.name, v)
        out.update({k: v for k, v in self.extra.items() if k not in out})
        return out

    def merged(self, metadata: Mapping[str, Any]) -> "JobMeta":
        """This metadata with the keys of ``metadata`` (Ray's form) laid over it, each parsed as
        :meth:`from_ray` parses it; the others kept as they are (the runner takes the queue's
        admission keys this way)."""
        over = JobMeta.from_ray(metadata)
        given = {f.name: getattr(over, f.name) for f in fields(self)
                 if f.name != "extra" and metadata.get(f.name) is not None}
        return replace(self, **given, extra={**self.extra, **over.extra})

    def with_(self, **changes: Any) -> "JobMeta":
        """A copy with ``changes`` (field names; typed values)."""
        return replace(self, **changes)


def point_of(job_id: str, sweep: str) -> int:
    """A sweep point's index from its id (``<sweep>-<n>``); 0 when it is no point of ``sweep``."""
    tail = job_id[len(sweep) + 1:] if sweep and job_id.startswith(sweep + "-") else ""
    return int(tail) if tail.isdigit() else 0


def _parse(name: str, value: Any, default: Any) -> Any:
    try:
        if name in _JSON_LISTS:
            items = json.loads(value) if isinstance(value, str) else list(value or [])
            if not isinstance(items, list):  # read whole or not at all: '"a"' is no list of one
                return default
            if name == "gpu_groups":
                return tuple(int(g) for g in items if int(g) > 0)
            return tuple(str(i) for i in items)
        if name in _FLAGS:
            return str(value).strip().lower() in ("1", "true", "yes")
        if isinstance(default, bool):
            return bool(value)
        if isinstance(default, int):
            return int(str(value).strip() or 0)
        if isinstance(default, float):
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        return default


def _format(name: str, value: Any) -> str:
    if name in _JSON_LISTS:
        return json.dumps(list(value))
    if name in _FLAGS:
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
