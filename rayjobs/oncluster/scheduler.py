"""The queue's rules, pure: ``decide(state, cluster, policy, now) -> Decision``.

No Ray, no I/O, no clock: the queue service (:mod:`rayjobs.oncluster.queueservice`) hands in what
it knows -- its jobs (:class:`~rayjobs.oncluster.queuestate.QueueState`), what is free per node
(:class:`ClusterView`), the head's settings (:class:`Policy`) and the time -- and carries out the
actions that come back. The rules run in the order of :data:`RULES`, top to bottom; each reads the
state and what the rules before it decided (:class:`Pass`), and may end the pass.

1. :func:`call_off_preemptions` -- a job being stopped for one that no longer waits trains on.
2. :func:`overdue_preemptions` -- a preempted job whose runner missed its deadline is stopped.
   :func:`halve_at_rungs` -- successive halving: a sweep point at a rung goes on only in the top
   ``keep`` of the points there so far; else it is stopped at its next checkpoint.
3. :func:`dependencies` -- ``rayjobs.after``: held until those SUCCEEDED; failed, never started, if one failed.
4. :func:`start_gpuless` -- a job without GPU groups starts at once.
5. :func:`queue_off` -- the queue switched off, or a cluster without GPUs: every ready job starts.
6. :func:`reap_gate` -- no GPU admission while what an ended job left on the nodes is reaped.
7. :func:`admit_in_order` -- higher priority first, then submission order: per-user quota, per-node
   fit with the groups promised to starting jobs, preemption of lower-priority preemptible jobs
   (the set that loses the least work: GPUs x time since each one's last checkpoint),
   backfill past a blocked job only while it waited less than ``backfill_s`` (the starvation guard).
8. :func:`pre_start` -- the next job in line is pre-started in Ray, its runner held until admission.

After them, whatever ended the pass: :func:`keep_warm` -- kept rollout engines (issue 50,
:mod:`rayjobs.oncluster.warmth`) a job admitted in this pass would land beside are evicted, as are
engines idle too long or beyond the per-node bound; those of ended jobs are released.

To add a rule: write a function of a :class:`Pass` here, put it in :data:`RULES` where it belongs,
and test it in ``tests/test_scheduler*.py`` on a :class:`QueueState` and a :class:`ClusterView`
built by hand. Nothing else changes: actions are carried out by the service.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from rayjobs.oncluster import capacity, halving, policy as team, warmth
from rayjobs.oncluster.queuestate import QueueState, Running, Waiting

#: What an admitted job's preemption may wait past its ``preempt_wait_s`` before the queue stops it.
OVERDUE_GRACE_S = 60.0


# --------------------------------------------------------------------------- inputs
Holdings = Mapping[str, Mapping[str, Sequence[float]]]


def _no_holdings(ids: Sequence[str]) -> Holdings:
    return {}


@dataclass(frozen=True)
class ClusterView:
    """What is free on each alive node now (GPUs and CPUs, after the placement groups already
    created), and -- asked only when a preemption is weighed -- what each running job's placement
    groups hold per node: ``holdings(ids) -> {id: {node id: [gpus, cpus]}}``."""

    nodes: tuple[capacity.Node, ...] = ()
    holdings: Callable[[Sequence[str]], Holdings] = _no_holdings
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


# --------------------------------------------------------------------------- one pass
@dataclass
class Pass:
    """One decision in the making: the inputs, and what the rules decided so far."""

    state: QueueState
    cluster: ClusterView
    policy: Policy
    now: float
    decision: Decision = field(default_factory=Decision)
    done: bool = False  #: a rule ended the pass
    started: set[str] = field(default_factory=set)  #: admitted or failed in this pass
    preempting: dict[str, str] = field(default_factory=dict)  #: victim -> for whom (before this pass and in it)
    reserved: list[int] = field(default_factory=list)  #: groups promised to admitted jobs not placed yet

    def act(self, action: Action) -> None:
        self.decision.actions.append(action)
        if isinstance(action, (Admit, Fail)):
            self.started.add(action.id)
        elif isinstance(action, Preempt):
            self.preempting[action.id] = action.by
        elif isinstance(action, CallOff):
            self.preempting.pop(action.id, None)

    def note(self, w: Waiting, text: str, hold: str = "") -> None:
        self.decision.notes[w.id] = text
        if hold:
            self.decision.holds[w.id] = hold

    def ready(self) -> bool:
        """Are waiting jobs left that no rule has held, admitted or failed?"""
        return len(self.started) + len(self.decision.holds) < len(self.state.waiting)

    def in_line(self) -> Any:
        """The waiting jobs in order that no rule holds and none admitted or failed in this pass."""
        skip = self.decision.holds
        return (w for w in self.state.in_order() if w.id not in skip and w.id not in self.started)


def decide(state: QueueState, cluster: ClusterView, policy: Policy, now: float) -> Decision:
    """Run :data:`RULES` over the queue once; the actions for the service to carry out, in order."""
    p = Pass(state, cluster, policy, now)
    p.preempting = {r.id: r.preempting_for for r in state.running.values() if r.preempting_for}
    p.reserved = [g for r in state.running.values() for g in r.unplaced]
    for rule in RULES:
        rule(p)
        if p.done:
            break
    keep_warm(p)
    return p.decision


# --------------------------------------------------------------------------- the rules
def call_off_preemptions(p: Pass) -> None:
    """A job being stopped for one that no longer waits (its user stopped it, or it started on GPUs
    freed elsewhere) trains on -- unless the queue already stopped it, or its own user asked."""
    for r in p.state.running.values():
        by = r.preempting_for
        if by and by not in p.state.waiting and not r.preempt_forced and not r.stop_asked:
            p.act(CallOff(r.id, by))


def overdue_preemptions(p: Pass) -> None:
    """A preempted job whose runner did not stop it within its ``preempt_wait_s`` (+ a grace): an
    old runner, a hung trainer. The queue stops it itself."""
    for r in p.state.running.values():
        if (r.preempting_for and r.id in p.preempting and not r.preempt_forced
                and p.now - r.preempt_asked > r.req.preempt_wait_s + OVERDUE_GRACE_S):
            p.act(StopOverdue(r.id))


def halve_at_rungs(p: Pass) -> None:
    """Successive halving (:mod:`rayjobs.oncluster.halving`): each running sweep point whose run
    reached a rung not judged yet is ranked against the points of its sweep that reached it before
    (in this pass too); outside the top ``keep`` it is halved, and its later rungs are not judged."""
    seen: dict[tuple[str, int], list[float]] = {}
    for r in sorted(p.state.running.values(), key=lambda r: r.id):
        h = r.req.halving
        if h is None or r.stop_asked or r.ending or r.rec.halved or not r.history:
            continue
        judged = [int(k) for k in r.rec.rungs]
        for rung, value in halving.rungs_due(h, r.history, judged):
            here = seen.setdefault((r.req.sweep, rung), [])
            v = halving.judge(h, rung, value, p.state.at_rung(r.req.sweep, rung, r.id) + here)
            p.act(Rung(r.id, v))
            if value is not None:
                here.append(value)
            if not v.goes_on:
                break


def dependencies(p: Pass) -> None:
    """``rayjobs.after``: a job waits until every job it names SUCCEEDED; one that failed or was
    stopped (or is gone) fails it, never started. A preempted job whose old Ray entry is still
    being deleted is held too (``requeueing``)."""
    st = p.state
    for job_id in sorted(st.with_after):
        w = st.waiting[job_id]
        pending, failed = [], []
        for dep in w.req.after:
            status = st.done.get(dep)
            if status is None and not st.holds(dep):
                status = "gone"
            if status == "SUCCEEDED":
                continue
            (pending if status is None else failed).append(dep if status is None else f"{dep} {status}")
        if failed:
            p.act(Fail(w.id, f"dependency failed: {', '.join(failed)}; it never started",
                       f"dependency failed: {failed[0]}"))
        elif pending:
            more = " ..." if len(pending) > 3 else ""
            p.note(w, f"after {', '.join(pending[:3])}{more}: starts once they SUCCEEDED", hold="after")
    for job_id in sorted(st.requeueing & set(st.waiting)):
        p.note(st.waiting[job_id], "preempted: back in the queue in a moment", hold="requeueing")


def start_gpuless(p: Pass) -> None:
    """A job that asks for no GPUs has nothing to fit: it starts at once."""
    for job_id in sorted(p.state.gpuless, key=lambda i: p.state.waiting[i].req.key()):
        if job_id not in p.decision.holds and job_id not in p.started:
            p.act(Admit(job_id))


def queue_off(p: Pass) -> None:
    """With the queue switched off, or on a cluster that declares no GPUs (the GPU demand cannot be
    enforced there), every ready job starts at once, as plain Ray would."""
    if p.policy.enabled and p.cluster.has_gpus:
        return
    why = "the queue is switched off" if not p.policy.enabled else \
        "the cluster has no GPUs: the GPU demand is not enforced"
    for w in list(p.in_line()):
        p.act(Admit(w.id, why))
    p.done = True


def reap_gate(p: Pass) -> None:
    """A job that used GPUs has ended (or its trainer has) and what it left on the nodes is not
    reaped yet: its GPUs may still hold memory, and which node's they are is not known here, so
    no GPU job is admitted until the reap is done."""
    if p.state.gpu_gate:
        p.decision.gate = p.state.gpu_gate
        p.done = True


def admit_in_order(p: Pass) -> None:
    """The line, in order: a job over its user's quota is passed over; one that fits is admitted
    (its groups promised until its trainer has placed them); the first that does not fit either
    has lower-priority preemptible jobs stopped for it, or -- blocked longer than ``backfill_s`` --
    holds everything behind it; else later jobs may backfill past it."""
    if not p.state.shapes or not p.ready():
        return
    nodes = list(p.cluster.nodes)
    held = p.state.gpus_by_user()
    # who else waits for GPUs: read only under a quota (a pass over every waiting job: 4 ms of 10,000)
    asking = ({w.req.user for w in p.state.waiting.values() if w.req.groups and w.id not in p.decision.holds}
              if p.policy.quota else set())
    shapes = {d for d, n in p.state.shapes.items() if n > 0}
    failed: dict[tuple[int, ...], capacity.Verdict] = {}
    for w in p.in_line():
        if not w.req.groups:
            continue
        p.decision.examined += 1
        over = team.over_quota(p.policy.quota, w.req, held, asking)
        if over:
            p.note(w, over, hold="quota")
            continue
        demand = tuple(sorted(w.req.groups))
        v = failed.get(demand) or capacity.fit(w.req.groups, nodes, p.reserved)
        if v.fits:
            p.act(Admit(w.id))
            p.reserved += list(w.req.groups)
            held[w.req.user] = held.get(w.req.user, 0) + w.req.gpus
            continue
        failed[demand] = v
        never = v.state == capacity.NEVER
        p.note(w, ("can never fit the cluster as it is now: " if never else "waiting: ") + v.reason)
        if not never and _preempt_for(p, w, nodes):
            _hold_behind(p, w, "preempting for it")
            return
        if not never and p.now - w.req.since >= p.policy.backfill_s:
            _hold_behind(p, w, f"waiting > {p.policy.backfill_s:g} s; no backfill")
            return
        if shapes <= set(failed):  # every demand in line has failed: nothing behind can fit
            return


def _hold_behind(p: Pass, w: Waiting, why: str) -> None:
    p.decision.reserving_for = w.id
    p.decision.blocked = f"held behind {w.id} ({why})"


def _preempt_for(p: Pass, w: Waiting, nodes: list[capacity.Node]) -> bool:
    """Have preemptible jobs of lower priority stopped at their next checkpoint so that ``w`` fits
    (:func:`rayjobs.oncluster.policy.cheapest_victims` chooses them: the least work lost; with
    ``victim_order=priority``, :func:`~rayjobs.oncluster.policy.victims`); True if ``w`` waits for such stops."""
    victims = sorted(v for v, by in p.preempting.items() if by == w.id)
    if not victims:
        cands = sorted((r for r in p.state.running.values() if _can_preempt(p, r, w)),
                       key=lambda r: (r.req.priority, -r.admitted_at))
        if not cands:
            return False
        held = p.cluster.holdings(tuple(r.id for r in cands))
        if p.policy.victim_order == "priority":
            chosen, why = team.victims(w.req.groups, nodes, p.reserved, cands, held), "lowest priority, then youngest"
        else:
            chosen = team.cheapest_victims(w.req.groups, nodes, p.reserved, cands, held, lambda r: _loss(p, r))
            why = "the least work lost: " + ", ".join(f"{r.req.gpus} GPU x {_since_checkpoint(p, r):.1f} s since "
                                                       f"its last checkpoint" for r in chosen)
        if not chosen:
            return False
        for r in chosen:
            p.act(Preempt(r.id, w.id, why))
        victims = [r.id for r in chosen]
    p.note(w, f"preempting {', '.join(victims)}: starts once they stopped at their next checkpoint")
    return True


def _since_checkpoint(p: Pass, r: Running) -> float:
    """Seconds of training a resume of ``r`` would redo: since its last checkpoint (or its admission)."""
    return max(0.0, p.now - max(r.checkpoint_at, r.admitted_at))


def _loss(p: Pass, r: Running) -> float:
    return r.req.gpus * _since_checkpoint(p, r)


def _can_preempt(p: Pass, r: Running, w: Waiting) -> bool:
    return (r.req.preemptible and r.req.priority < w.req.priority and r.in_ray and not r.ending
            and r.id not in p.preempting and not r.stop_asked)


def pre_start(p: Pass) -> None:
    """Pre-start the next job to be admitted (:mod:`rayjobs.oncluster.standby`): one at a time, not
    while an admitted trainer is still starting (Ray's job start would take CPU from the start-up
    the GPUs wait for), nor while a batch of stops comes in (a sweep's stop arrives in parts)."""
    st = p.state
    if not p.policy.standby or st.standby is not None or p.now < st.calm_until or not st.waiting:
        return
    if any(r.unplaced for r in st.running.values()):
        return
    nxt = next(iter(p.in_line()), None)
    if nxt is not None:
        p.act(Offer(nxt.id))


def keep_warm(p: Pass) -> None:
    """Kept rollout engines (:func:`rayjobs.oncluster.warmth.evictions`): a job admitted in this pass
    may land on any node with a GPU group's room free, and an idle engine there goes unless the job
    attaches to it -- in this very pass, so a warm engine never delays a job (it holds no Ray
    resource: the job's placement groups do not wait for it). A job with an engine of its key on
    a node it may land on says so in its admission note."""
    if not p.cluster.warm:
        return
    running = list(p.state.running)
    admitted = []
    for i, a in enumerate(p.decision.actions):
        w = p.state.waiting.get(a.id) if isinstance(a, Admit) else None
        if w is None or not w.req.groups:
            continue
        nodes = tuple(n.id for n in p.cluster.nodes if any(n.free_gpus >= g for g in w.req.groups))
        admitted.append(warmth.Admitted(w.id, w.req.warm, nodes))
        warm_at = [n for n in warmth.prefer(nodes, w.req.warm, p.cluster.warm, running)
                   if any(e.node == n and e.key == w.req.warm and e.idle(running) for e in p.cluster.warm)]
        if w.req.warm and warm_at:
            note = f"a warm engine of its model is on {warm_at[0]}"
            p.decision.actions[i] = Admit(a.id, f"{a.note}; {note}" if a.note else note)
    here = {a.id for a in admitted}
    earlier = [warmth.Earlier(r.id, r.req.warm, r.admitted_at) for r in p.state.running.values() if r.id not in here]
    for v in warmth.evictions(p.cluster.warm, admitted, running, p.now, p.policy.warm, earlier):
        p.act(Evict(v.name, v.why) if v.action == "evict" else Release(v.name, v.why))


#: The rules, in the order they run (see the module's docstring).
RULES: tuple[Callable[[Pass], None], ...] = (
    call_off_preemptions,
    overdue_preemptions,
    halve_at_rungs,
    dependencies,
    start_gpuless,
    queue_off,
    reap_gate,
    admit_in_order,
    pre_start,
)
