"""Kueue's classic rules as a policy of the simulator (the ``kueue`` baseline).

One ClusterQueue per user, all in one cohort; each user's nominal quota an equal share of the GPUs
(the remainder to the first users), borrowing unlimited (no ``borrowingLimit``): a user may use idle
GPUs of the cohort. Each queue is ``BestEffortFIFO`` (priority, then creation; a workload that does
not fit does not block the ones behind it). Preemption (``withinClusterQueue: LowerPriority``,
``reclaimWithinCohort: Any``): a workload that would fit its queue's nominal quota takes GPUs back
from queues borrowing beyond theirs, else from lower-priority workloads of its own queue; candidates
in Kueue's order (``CandidatesOrdering``: other queues first, lower priority, the most recently
admitted first), the shortest such prefix that lets it fit. Kueue evicts at once -- no checkpoint
to wait for -- and the evicted workload goes back to its queue (ordered by its eviction time, after
a backoff of 60 s doubling per eviction, Kueue's ``requeuingStrategy``).
Here admission also needs the GPUs free on the nodes (as with Kueue's topology-aware scheduling);
quota alone would admit pods that then wait on the nodes.
"""

from __future__ import annotations

from typing import Any

from rayjobs.oncluster import policy as team
from rayjobs.sim.baselines import Line, priority_key
from rayjobs.sim.engine import Sim


#: An evicted workload's requeue backoff: Kueue's ``requeuingStrategy`` (base 60 s, doubling, at most an hour).
BACKOFF_S, BACKOFF_MAX_S = 60.0, 3600.0


class _W:
    """A candidate as :func:`rayjobs.oncluster.policy.victims` reads it (``req.id``, ``unplaced``)."""

    def __init__(self, job_id: str, user: str, priority: int, admitted: float, gpus: int) -> None:
        self.req = type("Req", (), {"id": job_id, "priority": priority, "user": user, "gpus": gpus})()
        self.unplaced: list[int] = []
        self.admitted_at = admitted


class Kueue(Line):
    """See the module's docstring."""

    name = "kueue"

    def __init__(self) -> None:
        super().__init__()
        self.nominal: dict[str, int] = {}
        self.usage: dict[str, int] = {}
        self.admitted: dict[str, float] = {}
        self.evicting: dict[str, list[str]] = {}  #: preemptor -> its victims not gone yet
        self.evictions: dict[str, int] = {}
        self.backoff: dict[str, float] = {}  #: an evicted workload waits until then to be admitted again

    def key(self, sim: Sim, job_id: str) -> tuple:
        return priority_key(self, sim, job_id)

    def _quotas(self, sim: Sim) -> None:
        users = sorted({j.user for j in sim.trace.jobs})
        each, rest = divmod(sim.cluster.gpus, max(1, len(users)))
        self.nominal = {u: each + (1 if i < rest else 0) for i, u in enumerate(users)}

    def requeued(self, sim: Sim, job_id: str, why: str) -> None:
        self._keys.pop(job_id, None)  # requeued by its eviction's time
        n = self.evictions[job_id] = self.evictions.get(job_id, 0) + 1
        self.backoff[job_id] = sim.now + min(BACKOFF_MAX_S, BACKOFF_S * 2 ** (n - 1))
        sim.wake(self.backoff[job_id])
        self.submit(sim, job_id)

    def ended(self, sim: Sim, job_id: str, status: str) -> None:
        self._release(sim, job_id)

    def _release(self, sim: Sim, job_id: str) -> None:
        if self.admitted.pop(job_id, None) is not None:
            j = sim.lives[job_id].job
            self.usage[j.user] -= j.gpus

    def schedule(self, sim: Sim) -> None:
        if not self.nominal:
            self._quotas(sim)
        self.evicting = {w: [v for v in vs if v in sim.cluster.held] for w, vs in self.evicting.items()}
        failed: set[tuple[int, ...]] = set()
        tried: set[tuple] = set()  # (user, groups, priority, within nominal) that found no victims this pass
        for _, job_id in list(self.line):
            j = sim.lives[job_id].job
            if self.evicting.get(job_id) or self.backoff.get(job_id, 0.0) > sim.now:
                continue
            where = None if j.groups in failed else sim.cluster.fit(j.groups)
            if where is not None:
                self.take(job_id)
                self.evicting.pop(job_id, None)
                self.admitted[job_id] = sim.now
                self.usage[j.user] = self.usage.get(j.user, 0) + j.gpus
                sim.start(job_id, where)
                continue
            failed.add(j.groups)
            within = self.usage.get(j.user, 0) + j.gpus <= self.nominal.get(j.user, 0)
            k = (j.user, j.groups, j.priority, within)
            if k not in tried and not self._preempt_for(sim, job_id, within):
                tried.add(k)

    def _candidates(self, sim: Sim, job_id: str, within: bool) -> list[_W]:
        """Running workloads ``job_id`` may preempt, in Kueue's order."""
        j = sim.lives[job_id].job
        borrowing = {u for u, n in self.usage.items() if n > self.nominal.get(u, 0)} - {j.user} if within else set()
        cands = []
        for other, at in self.admitted.items():
            o = sim.lives[other].job
            if (o.user in borrowing or (o.user == j.user and o.priority < j.priority)) \
                    and sim.lives[other].attempt is not None:
                cands.append(_W(other, o.user, o.priority, at, o.gpus))
        cands.sort(key=lambda w: (w.req.user == j.user, w.req.priority, -w.admitted_at))
        return cands

    def _preempt_for(self, sim: Sim, job_id: str, within: bool) -> bool:
        """Evict the shortest prefix of the candidates that lets ``job_id`` fit; False if none does."""
        cands = self._candidates(sim, job_id, within)
        if not cands:
            return False
        held: dict[str, Any] = {w.req.id: sim.cluster.holdings(w.req.id) for w in cands}
        chosen = team.victims(sim.lives[job_id].job.groups, list(sim.cluster.view()), [], cands, held)
        for w in chosen:
            self._release(sim, w.req.id)
            sim.stop_now(w.req.id, "evicted")
        if chosen:
            self.evicting[job_id] = [w.req.id for w in chosen]
        return bool(chosen)


def describe_quota(k: Kueue) -> str:
    """The nominal quotas, for the report."""
    return ", ".join(f"{u}={n}" for u, n in sorted(k.nominal.items())) or "none"
