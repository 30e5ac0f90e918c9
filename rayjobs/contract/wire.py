"""The queue API's requests and answers: what the laptop sends the head and what comes back.

The queue serves them through its door (``rayjobs.door.app``: the head's loopback, and TLS for
teammates) under :data:`PREFIX`, JSON in and out, a token as a bearer header (the cluster's, or a
user's); its OpenAPI document
(``GET /v1/openapi.json``) is generated from these classes. Plain dataclasses (the standard library
only): the server validates a body into them (an unknown field or a wrong type is a 422 naming
it: ``__pydantic_config__`` forbids extra fields), the laptop's client builds them and reads the
answers (:func:`from_json`).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from rayjobs.contract.meta import JobMeta
from rayjobs.contract.status import word

#: The API's version: every route is under this prefix.
PREFIX = "/v1"
#: Where the head's queue listens (its loopback only), unless ``$RAYJOBS_API_PORT`` says otherwise.
DEFAULT_PORT = 8263
PORT_ENV = "RAYJOBS_API_PORT"
#: The file in the head's Ray log dir where the queue says where its API listens (this Ray session's).
API_FILE = "rayjobs_api.json"
#: The largest JSON body the API takes (a sweep of a few thousand points), and code archive.
MAX_BODY_BYTES = 64 << 20
MAX_CODE_BYTES = 512 << 20
#: Set on the head (by the node script, from ``cluster.door: network``): the door ALSO serves the
#: API over TLS on ``<node ip>[:port]`` for teammates (port default :data:`DOOR_TLS_PORT`).
DOOR_ADDRESS_ENV = "RAYJOBS_DOOR_ADDRESS"
DOOR_TLS_PORT = 8443
#: A job log's answer says what it is: ``whole`` (Ray's file), ``kept`` (what the queue kept), ``none``.
LOG_HEADER = "X-Rayjobs-Log"
#: A followed log's stream ends after this long at most (the client reconnects with its offset).
STREAM_MAX_S = 600.0
ROLES = ("admin", "member", "viewer")

_STRICT = {"extra": "forbid"}


@dataclass
class JobSubmit:
    """One job to queue: field for field the keyword arguments of Ray's ``submit_job``, the
    working_dir left out (the code is a snapshot the queue keeps: :class:`EnqueueRequest`)."""

    entrypoint: str
    submission_id: str
    metadata: dict[str, str] = field(default_factory=dict)
    runtime_env: dict[str, Any] = field(default_factory=dict)
    entrypoint_num_cpus: Optional[float] = None
    entrypoint_num_gpus: Optional[float] = None
    entrypoint_memory: Optional[int] = None
    entrypoint_resources: Optional[dict[str, float]] = None
    code_of: Optional[str] = None  #: run with this job's code snapshot (an evaluation of each sweep point)
    __pydantic_config__ = _STRICT


@dataclass
class EnqueueRequest:
    """Queue jobs, all or none. Their code: the snapshot ``code`` uploaded before
    (``PUT /v1/code/{code}``), or job ``code_of``'s snapshot (a rerun), or each job's own ``code_of``."""

    jobs: list[JobSubmit]
    code: Optional[str] = None
    code_of: Optional[str] = None
    __pydantic_config__ = _STRICT


@dataclass
class EnqueueReply:
    ids: list[str]  #: every job of the request, in its order
    queued: list[str]  #: those queued now
    existing: list[str]  #: those the queue had already (a retried request queues a job once)


@dataclass
class JobView:
    """A job as the queue knows it (the fields of Ray's job details where they mean the same)."""

    submission_id: str
    status: str  #: QUEUED, PENDING (handed to Ray), RUNNING, SUCCEEDED, FAILED, STOPPED, UNKNOWN
    state: str  #: the record's: waiting, admitted, done ("" when its record is unreadable)
    metadata: dict[str, str] = field(default_factory=dict)
    message: Optional[str] = None  #: why it waits, or how it ended
    queue_position: Optional[int] = None
    held: Optional[str] = None  #: after, quota, requeueing
    queued_at: Optional[float] = None
    admitted_at: Optional[float] = None
    finished_at: Optional[float] = None
    start_time: Optional[int] = None  #: Ray's, ms
    end_time: Optional[int] = None
    driver_node_id: Optional[str] = None  #: where its driver log is (the dashboard's log API)
    in_ray: bool = False
    cause: Optional[str] = None
    checkpoint_step: Optional[int] = None
    attempts: list[int] = field(default_factory=list)  #: the run's attempts this job ran
    first_attempt: Optional[int] = None
    lost: int = 0
    preemptions: int = 0
    preempted: Optional[dict[str, Any]] = None
    preempting_for: Optional[str] = None
    reaped: list[str] = field(default_factory=list)
    final: Optional[dict[str, Any]] = None
    pruned: bool = False
    from_queue: bool = False  #: ended: its log by file name, its progress from ``final`` (what the queue kept)
    rungs: dict[str, Optional[float]] = field(default_factory=dict)  #: successive halving: its value at each rung
    halved: Optional[dict[str, Any]] = None  #: {rung, value, rank, of, text}: its sweep's halving stopped it
    preempt_why: Optional[str] = None  #: why the queue chose it as a preemption's victim
    lost_runs: list[dict[str, Any]] = field(default_factory=list)  #: Ray runs lost with the head: lost_at, attempts, log
    #: [admitted, ended] (epoch s) of each time it held GPUs and gave them back ([] until it first did)
    spans: list[list[float]] = field(default_factory=list)
    foreign: bool = False  #: a Ray job the queue does not know (``GET /v1/jobs?foreign=true``; ``state`` "")

    @property
    def from_record(self) -> bool:
        """The laptop's, never on the wire: a job only its local record knows (``views.localrows.RecordJob``)."""
        return False

    @functools.cached_property
    def meta(self) -> JobMeta:
        """Its metadata, parsed once (every view reads a job's rayjobs keys through this)."""
        return JobMeta.from_ray(self.metadata)

    @classmethod
    def from_ray(cls, details: Any, *, foreign: bool = True) -> "JobView":
        """A job as Ray's details give it (``GET /api/jobs/ID``'s dict, the SDK's ``JobDetails``, or
        a door's dict of a job it lists) as a view: what Ray's fields say (status, metadata, times,
        message, driver node); ``foreign``: the queue does not know it. A JobView is returned as it is.
        Read by name, so contract/ needs no Ray."""
        if isinstance(details, JobView):
            return details
        get = details.get if isinstance(details, dict) else (lambda k, d=None: getattr(details, k, d))
        return cls(submission_id=str(get("submission_id") or ""),
                   status=word(get("status"), "UNKNOWN"), state=str(get("state") or ""),
                   metadata={str(k): str(v) for k, v in (get("metadata") or {}).items()},
                   message=get("message"), start_time=get("start_time"), end_time=get("end_time"),
                   driver_node_id=get("driver_node_id"), in_ray=True, foreign=foreign)


@dataclass
class JobList:
    jobs: list[JobView]
    total: int  #: jobs matching the filters, all pages
    next: Optional[str] = None  #: the cursor of the next page (None: this was the last)


@dataclass
class StopRequest:
    """Stop jobs: ``now`` (a waiting one never starts; a running one gets SIGTERM and the head's
    grace), or ``checkpoint`` (a running one stops right after its next checkpoint, at most
    ``timeout_s`` from now)."""

    ids: list[str]
    mode: Literal["now", "checkpoint"] = "now"
    timeout_s: float = 3600.0
    __pydantic_config__ = _STRICT


@dataclass
class StopOutcome:
    id: str
    outcome: Literal["cancelled", "stopping", "at_checkpoint", "ended"]
    status: str  #: its status now
    message: str = ""


@dataclass
class StopReply:
    results: list[StopOutcome]


@dataclass
class ResumeRequest:
    """Queue an ended job's exact request and code snapshot again as ``new_id`` (default:
    ``<id>-r<k>``): the same run, so verl resumes from its last checkpoint."""

    new_id: Optional[str] = None
    __pydantic_config__ = _STRICT


@dataclass
class RerunRequest:
    """Queue ``job`` (a new id, a new run) with the code snapshot of the job rerun."""

    job: JobSubmit
    __pydantic_config__ = _STRICT


@dataclass
class UsageReply:
    """Where the GPU-hours went (``rayjobs usage``): GPU-seconds per part (productive, redone, startup,
    idle; their sum ``allocated``; ``ettr`` = productive / allocated), ``waited`` seconds, ``jobs``,
    ``redone_steps`` -- in all, per user, per sweep and per job."""

    total: dict[str, Any]
    users: dict[str, dict[str, Any]]
    sweeps: dict[str, dict[str, Any]]
    jobs: dict[str, dict[str, Any]]  #: per job also its ``user``, ``sweep`` and ``last_at`` (epoch s)
    at: float = 0.0  #: when it was computed (epoch s, the head's clock)
    #: "cluster", or "record": the laptop's copy of the rows it last got (the cluster did not answer)
    source: str = "cluster"


@dataclass
class QueueSummary:
    """The queue at a glance (``rayjobs cluster``): the line's head with why each waits, the
    running jobs, use per user, the quota, the cluster's totals."""

    updated_at: float
    waiting: int
    admitted: int
    backfill_s: float
    reserving_for: Optional[str]
    gate: str  #: why no GPU job is admitted now ("" if they may be)
    cluster: dict[str, Any]
    quota: dict[str, int]
    users: dict[str, dict[str, Any]]
    line: list[JobView]  #: the first waiting jobs, in order
    running: list[JobView]


@dataclass
class Health:
    ok: bool
    version: str  #: rayjobs' on the head
    session: str  #: the Ray session the queue runs in
    pid: int
    started_at: float
    waiting: int
    admitted: int
    unreadable: int  #: record files the queue could not read (named in the job's status)
    verl: str = ""  #: verl's version on the head ("" where verl is not installed)
    store: str = ""  #: the queue's store: ``<storage root>/queue/<this cluster's name>``


@dataclass
class CodeReply:
    """A code snapshot is on the cluster (``GET``/``PUT /v1/code/{key}``)."""

    key: str
    present: bool = True


@dataclass
class ApiError:
    """Every refusal: one line, what was wrong and what to do."""

    error: str


# --------------------------------------------------------------------------- the door: who asks
@dataclass
class Identity:
    """Who a request is (``GET /v1/whoami``): the cluster's own token is its owner, an admin
    (``via="cluster"``); a user's token is that user (``via="token"``); the page's cookie ``session``."""

    name: str
    role: Literal["admin", "member", "viewer"]
    via: Literal["cluster", "token", "session"]
    token_id: Optional[str] = None


@dataclass
class UserAdd:
    """``POST /v1/users`` (admins): a new user and its first token (a revoked name may be added again)."""

    name: str
    role: Literal["admin", "member", "viewer"] = "member"
    __pydantic_config__ = _STRICT


@dataclass
class UserToken:
    """A user's new token, shown this once (the head keeps only its hash); where to reach the door
    from a teammate's machine (``url``, None: loopback only) and its certificate's fingerprint."""

    name: str
    role: str
    token: str
    token_id: str
    fingerprint: Optional[str] = None
    url: Optional[str] = None


@dataclass
class UserView:
    name: str
    role: str
    created_at: float
    revoked_at: Optional[float] = None
    tokens: list[str] = field(default_factory=list)  #: the ids of its tokens (never a secret)
    last_used_at: Optional[float] = None


@dataclass
class UserList:
    users: list[UserView]


@dataclass
class AuditEntry:
    """One line of the door's audit: a request that changed something, or one that was refused."""

    at: float
    user: str  #: "" when no identity was established (401, 429)
    role: str
    addr: str
    method: str
    path: str
    action: str  #: queue, stop, resume, rerun, code, users.add, users.revoke, auth, ...
    target: list[str]
    status: int
    result: str  #: one line


@dataclass
class AuditList:
    entries: list[AuditEntry]  #: oldest first, the newest ``limit``
    total: int  #: entries matching the filters


@dataclass
class PageLink:
    """``POST /v1/page/link``: a one-time login link to the team's page for the caller (``rayjobs ui``).
    ``path`` is the door's, with the code (a secret: the page's login until used, once, within
    ``expires_in`` seconds); the client puts the door's URL before it."""

    path: str
    expires_in: float


# --------------------------------------------------------------------------- the door: what the head reads for the laptop
@dataclass
class MetricStep:
    step: int
    data: dict[str, float]
    attempt: int  #: the attempt whose file the step came from


@dataclass
class Metrics:
    """A job's metrics (``GET /v1/jobs/{id}/metrics``): its run's files read on the head, attempts
    merged (a resumed attempt's steps replace the older ones'); ``source`` "none": no file yet."""

    steps: list[MetricStep]
    attempts: list[int]
    source: Literal["files", "none"]


@dataclass
class NodeInfo:
    node_id: str
    ip: str
    is_head: bool
    alive: bool
    gpus: float
    gpus_used: float
    cpus: float
    cpus_used: float
    labels: dict[str, str] = field(default_factory=dict)
    #: every resource Ray offers there: ``{name: [used, total]}`` (preflight's per-node fit)
    resources: dict[str, list[float]] = field(default_factory=dict)
    gpu_util: Optional[float] = None  #: mean GPU utilisation, percent (None: no GPU metrics)
    gpu_mem_used_mb: Optional[float] = None
    gpu_mem_total_mb: Optional[float] = None
    #: its metrics as read: cpu_percent, mem_used, mem_total, net_*_bps, gpus [{index, name, util_percent, mem_*_mib}]
    use: Optional[dict[str, Any]] = None
    versions: dict[str, str] = field(default_factory=dict)  #: rayjobs, commit, ray, verl, ... (its labels)


@dataclass
class ClusterInfo:
    """The cluster as the head sees it (``GET /v1/cluster``): what ``rayjobs cluster`` and
    preflight's live check (versions, per-node fit) need."""

    ray_version: str
    session: str
    rayjobs: str
    verl: str
    nodes: list[NodeInfo]
    queue: QueueSummary
    metrics: str = ""  #: where the per-node use came from, or why there is none


def to_json(obj: Any) -> Any:
    """A wire object (or a list/dict of them) as plain JSON data."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_json(x) for x in obj]
    if isinstance(obj, dict):
        return {k: to_json(v) for k, v in obj.items()}
    return obj


def from_json(cls: type, doc: Any) -> Any:
    """A wire class from the JSON an answer carried (unknown keys ignored: a newer head may add some).

    Raises:
        ValueError: ``doc`` is not an object with the class's required fields.
    """
    if not isinstance(doc, dict):
        raise ValueError(f"{cls.__name__}: expected an object, got {type(doc).__name__}")
    kw = {}
    for name, hint in _plan(cls):  # (a list of 100,000 views: the class is read once, not per view)
        if name in doc:
            kw[name] = doc[name] if hint is None else _typed(hint, doc[name])
    try:
        return cls(**kw)
    except TypeError as e:
        raise ValueError(f"{cls.__name__}: {e}") from None


@functools.lru_cache(maxsize=None)
def _plan(cls: type) -> tuple[tuple[str, Any], ...]:
    """Each field of ``cls`` with its type hint where it nests wire objects (None: taken as it is)."""
    hints = typing.get_type_hints(cls)

    def nests(hint: Any) -> bool:
        args = typing.get_args(hint)
        return (typing.get_origin(hint) is list and bool(args) and dataclasses.is_dataclass(args[0])
                or dataclasses.is_dataclass(hint))

    return tuple((f.name, hints[f.name] if nests(hints[f.name]) else None) for f in dataclasses.fields(cls))


def _typed(hint: Any, value: Any) -> Any:
    """Nested wire objects of a field (lists of them, or one); other values as they are."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is list and args and dataclasses.is_dataclass(args[0]) and isinstance(value, list):
        return [from_json(args[0], v) for v in value]
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return from_json(hint, value)
    return value


#: A code snapshot's key: ``z`` + the first 32 hex digits of the sha256 of its archive.
CODE_KEY_RE = r"^z[0-9a-f]{32}$"


def code_key(sha256_hex: str) -> str:
    """The key of a code archive whose sha256 is ``sha256_hex`` (the laptop and the head agree on it)."""
    return "z" + sha256_hex[:32]
