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

No Ray and no I/O here: the scheduler (:mod:`rayjobs.oncluster.scheduler`) passes what it knows.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Optional, Sequence

from rayjobs.oncluster import capacity

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
