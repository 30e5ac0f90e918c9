"""``rayjobs replay``: the team's own history on the cluster, run again under the queue's rules and
the baselines (or a policy and quota to ask "what if"), on the simulator (:mod:`rayjobs.sim`)."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from rayjobs.errors import ConfigError


def replay(*, since: str = "30d", policies: Sequence[str] = (), quota: Optional[str] = None,
           address: Optional[str] = None, plot: Optional[str] = None, save_trace: Optional[str] = None,
           say: Optional[Callable[[str], None]] = None) -> dict[str, Any]:
    """The jobs with GPUs that ran on the cluster in ``since`` (``30d``, ``12h``), as a trace, run on
    a simulated cluster of the same nodes under each of ``policies`` (default: the queue's rules and
    every baseline); ``quota`` (the head's ``RAYJOBS_QUOTA_GPUS`` form, ``8`` or ``alice=16,*=8``)
    applies to the queue's rules. Beside them, ``recorded``: what the queue did.

    Returns:
        ``{"since", "cluster": {nodes, gpus_per_node}, "trace": {jobs, left_out}, "recorded": {...},
        "policies": {name: the report of rayjobs.sim.metrics}}``.

    Raises:
        ConfigError: a bad ``since``, policy or quota; no job ran in the window. ClusterUnreachable.
    """
    from rayjobs.api.usage import since_ts
    from rayjobs.client.connection import connect
    from rayjobs.oncluster import policy as team, scheduler
    from rayjobs.sim import history, metrics, policies as pol, table, trace as tracefile

    t = since_ts(since)
    names = list(policies) or list(pol.NAMES)
    for n in names:
        if n not in pol.NAMES + pol.EXTRA:
            raise ConfigError(f"--policy {n!r}: one of {', '.join(pol.NAMES + pol.EXTRA)}")
    try:
        qp = scheduler.Policy(quota=team.parse_quota(quota)) if quota else None
    except ValueError as e:
        raise ConfigError(f"--quota: {e}".replace(team.QUOTA_ENV + ": ", "")) from None
    q = connect(address, address_from="--address", quiet=True).queue
    views, usage = q.jobs(since=t), q.usage(since=t).jobs
    shape = _shape(q.summary().cluster or {})
    tr, about = history.trace_from(views, usage, nodes=shape[0], gpus_per_node=shape[1])
    if not tr.jobs:
        raise ConfigError(f"no job with GPUs ran on the cluster in the last {since}: nothing to replay (a longer --since?)")
    if save_trace:
        tracefile.write(tr, save_trace)
    rec = history.recorded(views, usage, tr)
    reports, waits = {}, {"recorded": rec.pop("waits")}
    for n in names:
        reports[n], sim = pol.run(tr, n, qp)
        waits[n] = metrics.waits_of(sim.lives.values())
    if plot and table.cdf_plot(waits, plot, f"replay of the last {since}: waits") is None and say:
        say("the plot needs matplotlib: pip install matplotlib")
    return {"since": t, "cluster": {"nodes": shape[0], "gpus_per_node": shape[1]}, "trace": about,
            "recorded": rec, "policies": reports}


def _shape(cluster: dict[str, Any]) -> tuple[int, int]:
    """(nodes, GPUs a node) of the live cluster (the simulated one is that many even nodes)."""
    nodes = max(1, int(cluster.get("nodes") or 1))
    return nodes, max(1, round(float(cluster.get("gpus") or 0) / nodes))
