"""What one pass of the queue's rules (:func:`rayjobs.oncluster.scheduler.decide`) is handed besides
the queue itself -- what is free on the cluster (:class:`ClusterView`), the head's settings
(:class:`Policy`) -- and what it answers: the actions for the service to carry out, in a
:class:`Decision`. Plain data, no Ray, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, Union

from rayjobs.contract import capacity
from rayjobs.oncluster import halving, warmth


# --------------------------------------------------------------------------- inputs
#: Per running job, per node id, ``[gpus, cpus]`` its placement groups hold there.
Holdings = Mapping[str, Mapping[str, Sequence[float]]]


@dataclass(frozen=True)
class ClusterView:
    """What is free on each alive node now (GPUs and CPUs, after the placement groups already
    created), and what each running job's placement groups hold per node (``{id: {node id: [gpus,
    cpus]}}``: what a preemption would free). Plain data, read before :func:`decide`."""

    nodes: tuple[capacity.Node, ...] = ()
    holdings: Holdings = field(default_factory=dict)
    warm: tuple[warmth.WarmEngine, ...] = ()  #: kept rollout engines (issue 50)

    @property
    def has_gpus(self) -> bool:
        return any(n.gpus for n in self.nodes)


@dataclass(frozen=True)
class Policy:
    """The head's settings (environment of ``ray start`` on the head)."""

    backfill_s: float = 300.0  #: RAYJOBS_QUEUE_BACKFILL_S
    quota: Mapping[str, int] = field(default_factory=dict)  #: RAYJOBS_QUOTA_GPUS
    enabled: bool = True  #: RAYJOBS_QUEUE (off: every job starts at once, as plain Ray would)
    standby: bool = True  #: RAYJOBS_QUEUE_STANDBY (pre-start the next job)
    victim_order: str = "least-work"  #: RAYJOBS_PREEMPT_ORDER: least-work | priority (lowest, then youngest)
    fair_share: bool = True  #: RAYJOBS_FAIR_SHARE: within a priority, the user holding the least goes first
    fair_half_life_s: float = 4 * 3600.0  #: RAYJOBS_FAIR_HALF_LIFE_S: how fast past use is forgotten (the state's, set by its owner)
    size_weight: float = 2.0  #: RAYJOBS_FAIR_SIZE_WEIGHT: GPUs of rank per expected GPU-hour of a job (0: size is ignored)
    reclaim_short_s: float = 1800.0  #: RAYJOBS_FAIR_RECLAIM_S: a job expected to take this long at most may reclaim its share
    warm: warmth.Rules = field(default_factory=warmth.Rules)  #: RAYJOBS_WARM*: kept rollout engines


# --------------------------------------------------------------------------- actions
@dataclass(frozen=True)
class Admit:
    """Hand the job to Ray now."""

    id: str
    note: str = ""


@dataclass(frozen=True)
class Fail:
    """End a waiting job FAILED without starting it."""

    id: str
    message: str
    cause: str


@dataclass(frozen=True)
class Preempt:
    """Stop a running job at its next checkpoint, for ``by``; it goes back in line after (``why``: why it)."""

    id: str
    by: str
    why: str = ""


@dataclass(frozen=True)
class CallOff:
    """Withdraw the preemption of ``id`` (``by`` no longer waits): it trains on."""

    id: str
    by: str


@dataclass(frozen=True)
class StopOverdue:
    """A preempted job's runner did not stop it in time: stop it now."""

    id: str


@dataclass(frozen=True)
class Offer:
    """Pre-start this waiting job in Ray (its runner holds until admission)."""

    id: str


@dataclass(frozen=True)
class Rung:
    """A sweep point reached a rung of its successive halving: its standing there, and whether it
    goes on (else it is stopped at its next checkpoint: halved)."""

    id: str
    verdict: halving.Verdict


@dataclass(frozen=True)
class Evict:
    """End a kept rollout engine (``name``: its actor in :data:`~rayjobs.oncluster.warmth.NAMESPACE`): ``why``."""

    name: str
    why: str


@dataclass(frozen=True)
class Release:
    """A kept engine's job ended without handing it back: it is idle from now."""

    name: str
    why: str


Action = Union[Admit, Fail, Preempt, CallOff, StopOverdue, Offer, Rung, Evict, Release]


@dataclass
class Decision:
    """What one pass decided: the actions in order, and why the jobs it looked at wait."""

    actions: list[Action] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)  #: waiting id -> why it waits (those examined)
    holds: dict[str, str] = field(default_factory=dict)  #: waiting id -> "after" | "quota" | "requeueing"
    reserving_for: Optional[str] = None  #: nothing behind this job in line may start
    blocked: str = ""  #: why (the note every later job waits with)
    gate: str = ""  #: why no GPU job was admitted at all (a reap under way)
    examined: int = 0  #: waiting jobs the admission rule looked at (the pass's cost)

    def of(self, kind: type) -> list[Any]:
        return [a for a in self.actions if isinstance(a, kind)]
