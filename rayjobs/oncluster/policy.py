"""The queue's team rules, pure: per-user GPU quotas and which running jobs a preemption stops.

* **Quota** (``RAYJOBS_QUOTA_GPUS`` in the head's environment; unset = no quota): ``2`` caps every
  user at 2 GPUs, ``alice=4,*=2`` gives alice 4 and everyone else 2. A cap holds only while another
  user's job waits for GPUs: alone on the cluster a user may use all of it (GPUs never idle for a
  rule). A job it holds back waits as ``QUEUED (quota)``; it does not block the line (jobs behind
  it may start).
* **Victims**: among the preemptible jobs of lower priority, the set whose GPUs, freed, let the
  waiting job fit and that loses the least work (:func:`cheapest_victims`: GPUs x seconds since each
  one's last checkpoint, then the fewest, lower priority, the youngest); or, with the head's
  ``RAYJOBS_PREEMPT_ORDER=priority``, lowest priority first, then the youngest (:func:`victims`).

* **Fair share** (``RAYJOBS_FAIR_SHARE``, on by default): among jobs of one priority, the next to go
  is the one of the user holding the least GPUs -- now, plus what they held lately (decayed with a
  half-life of ``RAYJOBS_FAIR_HALF_LIFE_S``, 4 h): :func:`fair_rank`. A user alone takes whatever is
  free; a user who flooded the line with a sweep does not keep everyone else waiting behind it.
* **Kept GPUs** for a job blocked longer than the starvation guard's ``backfill_s``: each of its
  groups on the node closest to having it free (:func:`keep_nodes`); later jobs may still start on
  the other nodes (was: nothing behind it started anywhere).

No Ray and no I/O here: the scheduler (:mod:`rayjobs.oncluster.scheduler`) passes what it knows.
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from rayjobs.contract import capacity

QUOTA_ENV = "RAYJOBS_QUOTA_GPUS"


def parse_quota(text: str) -> dict[str, int]:
    """``"2"`` -> ``{"*": 2}``; ``"alice=4,*=2"`` -> ``{"alice": 4, "*": 2}``.

    Raises:
        ValueError: one line naming the part that is not ``N`` or ``user=N``.
    """
    out: dict[str, int] = {}
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        user, _, n = part.rpartition("=")
        try:
            value = int(n)
        except ValueError:
            raise ValueError(f"{QUOTA_ENV}: {part!r} is not N or user=N (GPUs)") from None
        if value < 0:
            raise ValueError(f"{QUOTA_ENV}: {part!r}: a quota is 0 or more GPUs")
        out[user.strip() or "*"] = value
    return out


def quota_from_env() -> dict[str, int]:
    """The head's quota (empty: none). A malformed value is said on stderr and ignored."""
    import sys

    try:
        return parse_quota(os.environ.get(QUOTA_ENV, ""))
    except ValueError as e:
        print(f"[rayjobs] warning: {e}; no quota applies", file=sys.stderr, flush=True)
        return {}


def cap(quota: dict[str, int], user: str) -> Optional[int]:
    return quota.get(user, quota.get("*"))


def gpus_by_user(requests: Iterable[Any]) -> dict[str, int]:
    """GPUs the given (admitted) jobs hold, per user."""
    out: dict[str, int] = {}
    for r in requests:
        out[r.user] = out.get(r.user, 0) + r.gpus
    return out


def over_quota(quota: dict[str, int], req: Any, held: dict[str, int], asking: set[str]) -> str:
    """Why ``req`` must wait for its user's quota (a note), or "" if it may go.

    ``held``: GPUs per user now; ``asking``: the users with jobs waiting for GPUs.
    """
    limit = cap(quota, req.user)
    if limit is None or not req.gpus or not (asking - {req.user}):
        return ""
    have = held.get(req.user, 0)
    if have + req.gpus <= limit:
        return ""
    return f"quota: {req.user or 'unknown'} holds {have} of {limit} GPUs while others wait (this job needs {req.gpus})"


def _fits_without(groups: Sequence[int], nodes: Sequence[capacity.Node], reserved: Sequence[int],
                  chosen: Sequence[Any], holdings: dict[str, dict[str, list[float]]]) -> bool:
    """Would ``groups`` fit once ``chosen`` stopped (their placement groups freed, their unplaced groups unreserved)?"""
    free = {n.id: [n.free_gpus, n.free_cpus] for n in nodes}
    left = list(reserved)
    for a in chosen:
        for node, (g, c) in holdings.get(a.req.id, {}).items():
            if node in free:
                free[node][0] += g
                free[node][1] += c
        for g in a.unplaced:
            if g in left:
                left.remove(g)
    sim = [capacity.Node(n.id, n.gpus, n.cpus, min(n.gpus, free[n.id][0]), min(n.cpus, free[n.id][1])) for n in nodes]
    return capacity.fit(groups, sim, left).fits


#: Candidates up to which every set of up to EXACT_SET victims is weighed (beyond: greedy by loss).
EXACT_UP_TO, EXACT_SET = 12, 4


def cheapest_victims(groups: Sequence[int], nodes: Sequence[capacity.Node], reserved: Sequence[int],
                     candidates: Sequence[Any], holdings: dict[str, dict[str, list[float]]],
                     loss: Callable[[Any], float]) -> list[Any]:
    """The set of ``candidates`` whose stop lets ``groups`` fit and loses the least work (``loss`` of
    each: GPUs x seconds since its last checkpoint, what its resume trains again), then the fewest,
    lower priority, the youngest; [] if even all of them would not do."""
    import itertools

    def key(combo: Sequence[Any]) -> tuple:
        return (sum(loss(a) for a in combo), len(combo), sum(a.req.priority for a in combo),
                -sum(a.admitted_at for a in combo))

    if len(candidates) <= EXACT_UP_TO:
        fitting = [c for k in range(1, min(EXACT_SET, len(candidates)) + 1)
                   for c in itertools.combinations(candidates, k) if _fits_without(groups, nodes, reserved, c, holdings)]
        if fitting:
            return list(min(fitting, key=key))
    by_loss = sorted(candidates, key=lambda a: key([a]))
    return victims(groups, nodes, reserved, by_loss, holdings)


def victims(groups: Sequence[int], nodes: Sequence[capacity.Node], reserved: Sequence[int],
            candidates: Sequence[Any], holdings: dict[str, dict[str, list[float]]]) -> list[Any]:
    """The first of ``candidates`` (in the order given) whose freed GPUs and CPUs let ``groups`` fit;
    [] if even all of them would not do.

    ``holdings``: per candidate id, per node id, ``[gpus, cpus]`` its placement groups hold;
    a candidate's groups without a placement group yet (``unplaced``) leave ``reserved``.
    """
    chosen: list[Any] = []
    for a in candidates:
        chosen.append(a)
        if _fits_without(groups, nodes, reserved, chosen, holdings):
            return chosen
    return []


#: A run of a kind never seen to succeed is expected to take this long (its GPUs x this, for the rank).
UNSEEN_RUN_S = 4 * 3600.0


def fair_rank(state: Any, held: Mapping[str, int], now: float, size_weight: float = 0.0) -> Callable[[Any], float]:
    """A waiting job's standing for fair share (lower goes first): the GPUs its user holds now
    (``held``: running and admitted in this pass, read at each call) plus the GPUs they held on average
    lately (their ended holdings, ``state.used``, and their running jobs' time so far, decayed with
    ``state.half_life_s``), plus ``size_weight`` x the GPU-hours the job is expected to take
    (``state.expected_s``, else :data:`UNSEEN_RUN_S`): among users alike, the smaller job first."""
    tau = state.half_life_s / math.log(2)
    ran: dict[str, float] = {}
    for r in state.running.values():
        if r.req.gpus:
            ran[r.req.user] = ran.get(r.req.user, 0.0) + r.req.gpus * tau * (1.0 - math.exp(-max(0.0, now - r.admitted_at) / tau))
    past: dict[str, float] = {}

    def rank(w: Any) -> float:
        u = w.req.user
        if u not in past:
            past[u] = (state.used(u, now) + ran.get(u, 0.0)) / tau
        size = 0.0
        if size_weight:
            took = state.expected_s(w)
            size = size_weight * w.req.gpus * (UNSEEN_RUN_S if took is None else took) / 3600.0
        return round(held.get(u, 0) + past[u] + size, 2)  # hundredths of a GPU: use forgotten is forgotten
    return rank


Ends = Mapping[str, Sequence[tuple[float, float]]]  #: per node: (when a running job there is expected to end, its GPUs there)


def ends_by_node(running: Iterable[Any], holdings: Mapping[str, Mapping[str, Sequence[float]]],
                 expected: Callable[[Any], Optional[float]], now: float) -> dict[str, list[tuple[float, float]]]:
    """Per node, each running job on it (``holdings``) with when it is expected to end -- admission +
    how long its kind of run takes (``expected``); inf if that is not known, or it ran past it -- sorted."""
    out: dict[str, list[tuple[float, float]]] = {}
    for r in running:
        took = expected(r)
        end = r.admitted_at + took if took is not None and r.admitted_at + took > now else math.inf
        for node, held in holdings.get(r.id, {}).items():
            out.setdefault(node, []).append((end, float(held[0])))
    for v in out.values():
        v.sort()
    return out


def free_at(free: float, need: float, ends: Sequence[tuple[float, float]], now: float) -> float:
    """When ``need`` GPUs should be free on a node with ``free`` now, its jobs ending at ``ends``."""
    have, when = free, now
    for end, g in ends:
        if have + 1e-6 >= need:
            break
        have, when = have + g, end
    return when if have + 1e-6 >= need else math.inf


def keep_nodes(groups: Sequence[int], nodes: Sequence[capacity.Node], kept: Mapping[str, float],
               ends: Ends = {}, now: float = 0.0) -> Optional[dict[str, float]]:
    """Where to keep GPUs for a blocked job: each group, biggest first, on the node with room for it
    (its total less what is kept there already) where it should be free soonest (``ends``: the
    running jobs' expected ends per node, :func:`ends_by_node`), then that has the most free now;
    per node, the GPUs to keep. None if some group finds no node."""
    taken = dict(kept)
    out: dict[str, float] = {}
    for g in sorted(groups, reverse=True):
        best: Optional[tuple[tuple[float, float, str], str]] = None
        for n in nodes:
            k = taken.get(n.id, 0.0)
            if n.gpus - k + 1e-6 < g or n.cpus - k * capacity.CPUS_PER_GPU + 1e-6 < g * capacity.CPUS_PER_GPU:
                continue
            key = (free_at(n.free_gpus, k + g, ends.get(n.id, ()), now), -(n.free_gpus - k), n.id)
            if best is None or key < best[0]:
                best = (key, n.id)
        if best is None:
            return None
        taken[best[1]] = taken.get(best[1], 0.0) + g
        out[best[1]] = out.get(best[1], 0.0) + g
    return out


def less_kept(nodes: Sequence[capacity.Node], kept: Mapping[str, float]) -> list[capacity.Node]:
    """The nodes as later jobs may use them: the GPUs (and their CPUs) kept on each taken away."""
    out = []
    for n in nodes:
        k = kept.get(n.id, 0.0)
        out.append(capacity.Node(n.id, n.gpus, n.cpus, max(0.0, n.free_gpus - k),
                                 max(0.0, n.free_cpus - k * capacity.CPUS_PER_GPU)) if k else n)
    return out


def kept_until(kept: Mapping[str, float], nodes: Sequence[capacity.Node], ends: Ends, now: float) -> dict[str, float]:
    """Per node with GPUs kept (``kept``): when that many should be free there (:func:`free_at`)."""
    free = {n.id: n.free_gpus for n in nodes}
    return {node: free_at(free.get(node, 0.0), k, ends.get(node, ()), now) for node, k in kept.items()}


def less_placed(nodes: Sequence[capacity.Node], groups: Sequence[int], placement: Sequence[str]) -> list[capacity.Node]:
    """The nodes once ``groups`` took their GPUs (and CPUs) where ``placement`` put them (a node id each)."""
    take = per_node(groups, placement)
    return [capacity.Node(n.id, n.gpus, n.cpus, n.free_gpus - take[n.id],
                          n.free_cpus - take[n.id] * capacity.CPUS_PER_GPU) if n.id in take else n for n in nodes]


def per_node(groups: Sequence[int], placement: Sequence[str]) -> dict[str, float]:
    """GPUs per node of ``groups`` placed on ``placement`` (a node id each)."""
    out: dict[str, float] = {}
    for g, nid in zip(groups, placement):
        out[nid] = out.get(nid, 0.0) + g
    return out


def plus_held(nodes: Sequence[capacity.Node], holdings: Iterable[Mapping[str, Sequence[float]]]) -> list[capacity.Node]:
    """The nodes once jobs holding ``holdings`` (per node ``[gpus, cpus]``, a mapping per job) left them."""
    back: dict[str, list[float]] = {}
    for held in holdings:
        for nid, (g, c) in held.items():
            b = back.setdefault(nid, [0.0, 0.0])
            b[0] += float(g)
            b[1] += float(c)
    return [capacity.Node(n.id, n.gpus, n.cpus, min(n.gpus, n.free_gpus + back[n.id][0]),
                          min(n.cpus, n.free_cpus + back[n.id][1])) if n.id in back else n for n in nodes]
