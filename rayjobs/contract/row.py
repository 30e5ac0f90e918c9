"""A job's row: what ``rayjobs list --json`` and ``status --json`` print and ``rayjobs.api.list_jobs`` /
``Job.row`` return (design §3's JSON fields), declared once.

A plain JSON-able dict (users read it as one), typed here so every place that builds a row --
``views.jobrows.base_row`` (the queue's and Ray's jobs), ``views.localrows`` (the local record's) and
the final copies ``api.keeping`` keeps -- builds the same keys. Times are ISO 8601 strings with
the laptop's offset. The keys declared required are in every row; the optional ones only in some.
"""

from __future__ import annotations

from typing import Any, Optional, TypedDict


class _EveryRow(TypedDict):
    """Every row's keys, in the order ``list --json`` prints them."""

    id: Optional[str]  #: the submission id (None: a plain Ray driver, which has none)
    status: str  #: a :class:`rayjobs.contract.status.Status` value (Ray's own word if newer)
    experiment: str
    sweep: Optional[str]  #: the sweep id of a sweep point
    overrides: list[str]  #: the user's overrides, as typed
    priority: int
    attempt: Optional[int]  #: the attempt running or last run (0: none yet); None only while a row is built
    max_attempts: int  #: 1 + rayjobs.max_retries (+ runs lost with the head)
    submitted_at: Optional[str]
    queue_position: Optional[int]  #: its place in line (QUEUED)
    sweep_overrides: list[str]  #: the overrides that vary across its sweep
    label: str  #: the sweep point, else the user's own overrides (short keys), for tables and legends
    run: Optional[str]  #: verl's trainer.experiment_name: a resume keeps it
    resumed_from: Optional[str]  #: the job `rayjobs resume` continued
    rerun_of: Optional[str]  #: the job `rayjobs rerun` ran again
    gpus: int
    start_time: Optional[str]  #: Ray's
    end_time: Optional[str]
    queued_at: Optional[str]  #: the queue's own times, to the ms (None for a job it never held)
    admitted_at: Optional[str]
    finished_at: Optional[str]
    message: Optional[str]  #: Ray's (or the queue's) message, without the log copy Ray appends
    cause: Optional[str]  #: why the queue (or the runner) ended it ("cluster restarted"), if one did
    reaped: list[str]  #: what the queue killed of it once it ended (reaper)
    user: Optional[str]  #: who submitted it (per-user quotas)
    preemptible: bool
    after: list[str]  #: the jobs it waits for (rayjobs.after)
    held: Optional[str]  #: why the queue holds it back: "after", "quota", "requeueing"
    preempted_by: Optional[str]  #: it waits again, preempted by this job
    redo_steps: Optional[int]  #: the steps that preemption costs it
    preemptions: Optional[int]
    preempting_for: Optional[str]  #: it is being stopped at its next checkpoint for this job
    preempt_why: Optional[str]  #: why it was chosen
    rungs: Optional[dict[str, Optional[float]]]  #: successive halving: its value at each rung it reached
    halved: Optional[dict[str, Any]]  #: {rung, value, rank, of, text}: its sweep's halving stopped it
    lost: Optional[list[str]]  #: its Ray runs lost with the head, and where their logs stay
    error: Optional[str]  #: the log's last exception line (FAILED)
    step: Optional[int]
    total_steps: Optional[int]
    checkpoint_step: Optional[int]  #: the last complete checkpoint (a resume starts from it)
    score: Optional[float]  #: critic/score/mean at the last step
    metrics: dict[str, float]  #: the last step's metrics
    wandb_url: Optional[str]


class JobRow(_EveryRow, total=False):
    """A row: every row's keys (:class:`_EveryRow`, required), then those only some rows carry."""

    failures: list[str]  #: the runner's one-line cause of each failed attempt
    source: str  #: "local" (the local record's copy, the cluster gone) or "record" (a job no command saw)
    final: bool  #: a local row: is its status the job's last (a kept final copy)
    kept_at: Optional[str]  #: when the final copy was kept
    metrics_kept: Optional[str]  #: where the kept metrics came from: "jsonl" or "log"
    seen_at: Optional[str]  #: a local row: when a command last saw the job


#: The keys every row has, in their order (a key that is a ``JobMeta`` field is filled from it).
ROW_KEYS: tuple[str, ...] = tuple(_EveryRow.__annotations__)
#: The keys every row has, and those some have (a test holds every builder of rows to these).
REQUIRED: frozenset[str] = frozenset(JobRow.__required_keys__)
OPTIONAL: frozenset[str] = frozenset(JobRow.__optional_keys__)
