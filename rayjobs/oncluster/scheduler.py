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

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from rayjobs.contract import capacity
from rayjobs.contract.status import Status
from rayjobs.oncluster import halving, policy as team, warmth
from rayjobs.oncluster.decision import (  # noqa: F401  (the rules' inputs and answers, by their usual names)
    Action, Admit, CallOff, ClusterView, Decision, Evict, Fail, Holdings, Offer, Policy, Preempt, Release, Rung,
    StopOverdue,
)
from rayjobs.oncluster.queuestate import QueueState, Running, Waiting

#: Jobs blocked longer than ``backfill_s`` with GPUs kept for them at a time (EASY backfill keeps one).
KEEP_FOR = 1
#: What an admitted job's preemption may wait past its ``preempt_wait_s`` before the queue stops it.
OVERDUE_GRACE_S = 60.0


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
    held: dict[str, int] = field(default_factory=dict)  #: GPUs per user: running, and admitted in this pass
    kept: dict[str, float] = field(default_factory=dict)  #: GPUs per node kept for jobs blocked too long
    kept_until: Optional[dict[str, float]] = None  #: per node with GPUs kept, when they should be free
    blocked_kept: int = 0  #: jobs blocked longer than backfill_s that GPUs are kept for in this pass
    nodes: list[capacity.Node] = field(default_factory=list)  #: free per node, less this pass's admissions
    _share: Optional[float] = None
    _ends: Optional[team.Ends] = None
    _rank: Optional[Callable[[Waiting], float]] = None

    def ends(self) -> team.Ends:
        """Per node, when each running job there is expected to end (:func:`rayjobs.oncluster.policy.ends_by_node`)."""
        if self._ends is None:
            self._ends = team.ends_by_node(self.state.running.values(), self.cluster.holdings,
                                           self.state.expected_s, self.now)
        return self._ends

    def share(self) -> float:
        """An even share of the cluster's GPUs among the users with jobs running or waiting."""
        if self._share is None:
            users = self.state.waiting_users() | {r.req.user for r in self.state.running.values()}
            self._share = sum(n.gpus for n in self.cluster.nodes) / max(1, len(users))
        return self._share

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
        """The waiting jobs in order that no rule holds and none admitted or failed in this pass: by
        priority, then (with ``fair_share``) the user holding the least (:func:`rayjobs.oncluster.policy.fair_rank`),
        then submission."""
        skip = self.decision.holds
        if self.policy.fair_share:
            if self._rank is None:
                self._rank = team.fair_rank(self.state, self.held, self.now, self.policy.size_weight)
            line = self.state.in_fair_order(self._rank)
        else:
            line = self.state.in_order()
        return (w for w in line if w.id not in skip and w.id not in self.started)


def decide(state: QueueState, cluster: ClusterView, policy: Policy, now: float) -> Decision:
    """Run :data:`RULES` over the queue once; the actions for the service to carry out, in order
    (none, at no cost, when :func:`needs_pass` says no rule could act)."""
    if not needs_pass(state, cluster):
        return Decision()
    p = Pass(state, cluster, policy, now)
    p.preempting = {r.id: r.preempting_for for r in state.running.values() if r.preempting_for}
    p.reserved = [g for r in state.running.values() for g in r.unplaced]
    p.held = state.gpus_by_user()
    for rule in RULES:
        rule(p)
        if p.done:
            break
    keep_warm(p)
    return p.decision


def needs_pass(state: QueueState, cluster: Optional[ClusterView] = None) -> bool:
    """Could a pass decide anything? Only while jobs wait, while a running job is one a rule
    about running jobs watches (:data:`WATCHES`), or while engines are kept warm (:func:`keep_warm`)."""
    return (bool(state.waiting) or bool(cluster is not None and cluster.warm)
            or any(watch(r) for r in state.running.values() for watch in WATCHES))


def _preempting(r: Running) -> bool:
    return bool(r.preempting_for)  # call_off_preemptions, overdue_preemptions


def _halved_sweep(r: Running) -> bool:
    return r.req.halving is not None  # halve_at_rungs


#: Running jobs a rule acts on with nothing waiting: a rule about running jobs adds its test here.
WATCHES: tuple[Callable[[Running], bool], ...] = (_preempting, _halved_sweep)


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
            if status == Status.SUCCEEDED:
                continue
            (pending if status is None else failed).append(dep if status is None else f"{dep} {status}")
        if failed:
            p.act(Fail(w.id, f"dependency failed: {', '.join(failed)}; it never started",
                       f"dependency failed: {failed[0]}"))
        elif pending:
            more = " ..." if len(pending) > 3 else ""
            p.note(w, f"after {', '.join(pending[:3])}{more}: starts once they SUCCEEDED", hold="after")
    for job_id in sorted(i for i in st.requeueing if i in st.waiting):
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
    (its groups' nodes taken for the rest of the pass); the first that does not fit either has
    lower-priority preemptible jobs stopped for it, or -- blocked longer than ``backfill_s`` -- has
    GPUs kept for it (:func:`_keep_for`: the nodes closest to fitting it take no later job but
    those expected to end before they are needed, :func:`_onto_kept`); else later jobs may backfill
    past it."""
    if not p.state.shapes or not p.ready():
        return
    p.nodes = list(p.cluster.nodes)
    # who else waits for GPUs: read only under a quota (a pass over every waiting job: 4 ms of 10,000)
    asking = ({w.req.user for w in p.state.waiting.values() if w.req.groups and w.id not in p.decision.holds}
              if p.policy.quota else set())
    shapes = {d for d, n in p.state.shapes.items() if n > 0}
    failed: dict[tuple[int, ...], capacity.Verdict] = {}
    for w in p.in_line():
        if not w.req.groups:
            continue
        p.decision.examined += 1
        over = team.over_quota(p.policy.quota, w.req, p.held, asking)
        if over:
            p.note(w, over, hold="quota")
            continue
        demand = tuple(sorted(w.req.groups))
        v = failed.get(demand) or capacity.fit(w.req.groups, _free_for(p, w), p.reserved)
        if v.fits:
            _admit(p, w, v)
            continue
        failed[demand] = v
        if _kept_from(p, w):
            continue
        never = v.state == capacity.NEVER
        p.note(w, ("can never fit the cluster as it is now: " if never else "waiting: ") + v.reason)
        victims = [] if never else _preempt_for(p, w, p.nodes)
        if victims and not _keep_for(p, w, p.nodes, victims):
            _hold_behind(p, w, "preempting for it")
            return
        if victims:
            continue
        if (not never and p.now - w.req.since >= p.policy.backfill_s and p.blocked_kept < KEEP_FOR
                and not _keep_for(p, w, p.nodes)):
            _hold_behind(p, w, f"waiting > {p.policy.backfill_s:g} s; no backfill")
            return
        if shapes <= set(failed):  # every demand in line has failed: nothing behind can fit
            return


def _free_for(p: Pass, w: Waiting) -> list[capacity.Node]:
    """The nodes ``w`` may use: less the GPUs kept for jobs blocked too long; and for a job smaller
    than a node, only nodes in use already while a job that needs whole nodes waits and fits."""
    return team.less_kept(p.nodes, p.kept) if p.kept else p.nodes


def _admit(p: Pass, w: Waiting, v: capacity.Verdict) -> None:
    """Admit ``w`` where ``v`` placed it: those GPUs are taken for the rest of the pass."""
    p.act(Admit(w.id))
    p.held[w.req.user] = p.held.get(w.req.user, 0) + w.req.gpus
    p.nodes = team.less_placed(p.nodes, w.req.groups, v.placement)


def _kept_from(p: Pass, w: Waiting) -> bool:
    """``w`` did not fit, but would on the free nodes as they are: GPUs kept for a blocked job, or
    whole nodes left to a job that needs them, are in its way. It may still go onto the kept GPUs
    if expected to be done before they are needed (:func:`_onto_kept`); True if it was dealt with."""
    if not p.kept or not capacity.fit(w.req.groups, p.nodes, p.reserved).fits:
        return False
    if not _onto_kept(p, w, p.nodes):
        p.note(w, p.decision.blocked)
    return True


def _onto_kept(p: Pass, w: Waiting, nodes: list[capacity.Node]) -> bool:
    """A job expected to end (:meth:`QueueState.expected_s`: as its kind of run took) before the
    GPUs kept for a blocked job are needed there -- the jobs on those nodes ending as expected
    (:func:`rayjobs.oncluster.policy.kept_until`) -- may run on them: EASY backfill's test, on the
    lengths runs were seen to take instead of users' time limits. True if it was admitted."""
    took = p.state.expected_s(w)
    if took is None:
        return False
    if p.kept_until is None:
        p.kept_until = team.kept_until(p.kept, nodes, p.ends(), p.now)
    still = {n: k for n, k in p.kept.items() if p.kept_until.get(n, math.inf) < p.now + took}
    v = capacity.fit(w.req.groups, team.less_kept(nodes, still), p.reserved)
    if not v.fits:
        return False
    p.act(Admit(w.id, f"backfilled onto GPUs kept for {p.decision.reserving_for}: expected to take {took:.0f} s, "
                      f"done before they are needed"))
    p.held[w.req.user] = p.held.get(w.req.user, 0) + w.req.gpus
    p.nodes = team.less_placed(p.nodes, w.req.groups, v.placement)
    return True


def _keep_for(p: Pass, w: Waiting, nodes: list[capacity.Node], victims: Sequence[str] = ()) -> bool:
    """Keep GPUs for ``w``: where it fits once its ``victims`` stopped, or -- blocked longer than
    ``backfill_s`` -- on the nodes closest to fitting it (:func:`rayjobs.oncluster.policy.keep_nodes`).
    No later job starts on them but one expected to end before they are needed (:func:`_onto_kept`);
    the rest of the cluster stays open to backfill (a reservation, as EASY backfill's). False if no
    set of nodes is left for it."""
    if victims:
        after = team.plus_held(nodes, [p.cluster.holdings.get(v, {}) for v in victims])
        v = capacity.fit(w.req.groups, team.less_kept(after, p.kept), p.reserved)
        got = team.per_node(w.req.groups, v.placement) if v.fits else None
        why = "preempting for it"
    else:
        got = team.keep_nodes(w.req.groups, nodes, p.kept, p.ends(), p.now)
        why = f"waiting > {p.policy.backfill_s:g} s"
    if not got:
        return False
    for n, g in got.items():
        p.kept[n] = p.kept.get(n, 0.0) + g
    p.blocked_kept += 0 if victims else 1
    p.kept_until = None
    where = ", ".join(sorted(got))
    p.note(w, f"{p.decision.notes.get(w.id, 'waiting')}; GPUs kept for it on {where} (no later job starts on them)")
    if p.decision.reserving_for is None:
        p.decision.reserving_for = w.id
        p.decision.blocked = f"held behind {w.id} ({why}; no backfill onto the GPUs kept for it on {where})"
    return True


def _hold_behind(p: Pass, w: Waiting, why: str) -> None:
    p.decision.reserving_for = w.id
    p.decision.blocked = f"held behind {w.id} ({why})"


def _preempt_for(p: Pass, w: Waiting, nodes: list[capacity.Node]) -> list[str]:
    """Have preemptible jobs stopped at their next checkpoint so that ``w`` fits -- jobs of lower
    priority, or (fair share) of a user holding more than ``w``'s (:func:`_reclaims`) --
    (:func:`rayjobs.oncluster.policy.cheapest_victims` chooses them: the least work lost; with
    ``victim_order=priority``, :func:`~rayjobs.oncluster.policy.victims`); the jobs ``w`` waits for."""
    victims = sorted(v for v, by in p.preempting.items() if by == w.id)
    if not victims:
        cands = sorted((r for r in p.state.running.values() if _can_preempt(p, r, w)),
                       key=lambda r: (r.req.priority, -r.admitted_at))
        if not cands:
            return []
        held = p.cluster.holdings
        if p.policy.victim_order == "priority":
            chosen, why = team.victims(w.req.groups, nodes, p.reserved, cands, held), "lowest priority, then youngest"
        else:
            chosen = team.cheapest_victims(w.req.groups, nodes, p.reserved, cands, held, lambda r: _loss(p, r))
            why = "the least work lost: " + ", ".join(f"{r.req.gpus} GPU x {_since_checkpoint(p, r):.1f} s since "
                                                       f"its last checkpoint" for r in chosen)
        if not chosen:
            return []
        for r in chosen:
            p.act(Preempt(r.id, w.id, why if r.req.priority < w.req.priority else f"fair share: {why}"))
        victims = [r.id for r in chosen]
    p.note(w, f"preempting {', '.join(victims)}: starts once they stopped at their next checkpoint")
    return victims


def _since_checkpoint(p: Pass, r: Running) -> float:
    """Seconds of training a resume of ``r`` would redo: since its last checkpoint (or its admission)."""
    return max(0.0, p.now - max(r.checkpoint_at, r.admitted_at))


def _loss(p: Pass, r: Running) -> float:
    return r.req.gpus * _since_checkpoint(p, r)


def _can_preempt(p: Pass, r: Running, w: Waiting) -> bool:
    if not (r.req.preemptible and r.in_ray and not r.ending and r.id not in p.preempting and not r.stop_asked):
        return False
    return r.req.priority < w.req.priority or (r.req.priority == w.req.priority and _reclaims(p, r, w))


def _reclaims(p: Pass, r: Running, w: Waiting) -> bool:
    """Fair share's preemption: ``w`` (waiting ``backfill_s`` or more) takes GPUs back from ``r`` (running
    as long) if ``w``'s user, with it, holds at most an even share of the cluster among the users
    with work, and ``r``'s user, without ``r``, still holds more than that."""
    if not p.policy.fair_share or r.req.user == w.req.user or min(p.now - w.req.since, p.now - r.admitted_at) < p.policy.backfill_s:
        return False
    took = p.state.expected_s(w)
    if took is None or took > p.policy.reclaim_short_s:
        return False
    mine = p.held.get(w.req.user, 0) + w.req.gpus
    return mine <= p.share() and p.held.get(r.req.user, 0) - r.req.gpus > mine


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


#: The rules, in the order they run (see the module's docstring).
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
