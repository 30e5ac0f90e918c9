"""Prometheus text from Ray's nodes: fetch several endpoints at once, parse, merge into one.

Ray's dashboard agent exports each node's metrics (GPU utilisation and memory, CPU, RAM, network,
Ray's own) on that node's ``metrics_export_port``; the dashboard lists those endpoints for
Prometheus' HTTP service discovery (``/api/prometheus/sd``). The head's alone (it reaches every
node from inside the cluster's network; the laptop never imports this): two users here,

* the metrics gateway (:mod:`rayjobs.oncluster.metricsgateway`) merges every node's text into one
  exposition on the head's loopback, for Prometheus and Grafana (``rayjobs connect`` tunnels it);
* ``GET /v1/cluster`` (:mod:`rayjobs.oncluster.clusterinfo`) reads per-node use from it, which
  ``rayjobs cluster`` shows for every target (the embedded head, a tunnel, a team's door).

Parsing and writing use ``prometheus_client`` (a dependency of ``ray[default]``), imported lazily.
Every fetch is bounded (``timeout`` per endpoint, all in parallel).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Optional

#: Ray's service-discovery document: ``[{"labels": {...}, "targets": ["10.0.0.1:8090", ...]}]``.
SD_PATH = "/api/prometheus/sd"
#: Per-endpoint health in a merged exposition: 1 = scraped, 0 = not (its ``target`` label says which).
UP_METRIC = "rayjobs_metrics_target_up"


def targets(sd: Any) -> list[str]:
    """``host:port`` of every endpoint in a service-discovery document, in order, once each."""
    out: list[str] = []
    for group in sd if isinstance(sd, list) else []:
        for t in (group or {}).get("targets") or []:
            if isinstance(t, str) and t and t not in out:
                out.append(t)
    return out


def fetch(url: str, timeout: float = 3.0, headers: Optional[dict[str, str]] = None) -> str:
    """GET ``url`` as text (one request, bounded). Raises OSError (URLError, timeouts) on failure."""
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 (http to cluster addresses)
        return r.read().decode("utf-8", "replace")


def scrape(endpoints: Iterable[str], timeout: float = 3.0) -> dict[str, Any]:
    """``{endpoint: text}`` for each ``host:port`` that answered, ``{endpoint: OSError}`` otherwise.

    All at once (at most 32 in flight), each bounded by ``timeout``: one dead node costs one
    timeout, not one per node.
    """
    eps = list(dict.fromkeys(endpoints))
    if not eps:
        return {}

    def one(ep: str) -> Any:
        url = ep if "://" in ep else f"http://{ep}/metrics"
        try:
            return fetch(url, timeout)
        except (OSError, ValueError) as e:  # URLError, timeouts, resets, a bad URL
            return e

    with ThreadPoolExecutor(max_workers=min(32, len(eps))) as pool:
        return dict(zip(eps, pool.map(one, eps)))


def families(text: str) -> list[Any]:
    """The metric families of one exposition (``prometheus_client`` Metric objects)."""
    from prometheus_client.parser import text_string_to_metric_families

    return list(text_string_to_metric_families(text))


def merge(texts: dict[str, Any]) -> str:
    """One exposition holding every family of ``texts`` once, samples of all endpoints together.

    Plain concatenation is not valid Prometheus text (a family's ``# TYPE`` line may appear only
    once); Ray's samples already carry the node's ``ip``, so nothing is relabelled. An endpoint that
    could not be read, or sent text that does not parse, shows as ``rayjobs_metrics_target_up 0``.
    """
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.exposition import generate_latest

    merged: dict[str, Metric] = {}
    up = GaugeMetricFamily(UP_METRIC, "1 if rayjobs' gateway read this Ray metrics endpoint", labels=["target"])
    for ep, text in texts.items():
        ok = isinstance(text, str)
        if ok:
            try:
                fams = families(text)
            except ValueError:  # a half-written or foreign answer
                fams, ok = [], False
            for fam in fams:
                have = merged.setdefault(fam.name, fam)
                if have is not fam and have.type == fam.type:  # (a clash of types: the first wins)
                    have.samples.extend(fam.samples)
        up.add_metric([ep], 1.0 if ok else 0.0)

    class _Merged:  # a collector of already-built families, for prometheus_client's writer
        def collect(self) -> Iterable[Metric]:
            yield from merged.values()
            yield up

    return generate_latest(_Merged()).decode()  # type: ignore[arg-type]


def read_cluster(d: Any, timeout: float = 3.0) -> tuple[list[Any], str]:
    """The parsed metric families of every node of ``d``'s cluster, and where they came from.

    ``d`` is the head's :class:`rayjobs.oncluster.raydash.RayDash` (anything with
    ``metrics_endpoints()``); each endpoint is scraped directly. Never raises: ``([], why)`` when
    nothing answered.
    """
    try:
        eps = d.metrics_endpoints()
    except Exception as e:  # noqa: BLE001  (the dashboard is down, an older Ray without the endpoint)
        return [], f"the dashboard lists no metrics endpoints ({e.__class__.__name__})"
    texts = scrape(eps, timeout)
    fams = [f for t in texts.values() if isinstance(t, str) for f in families(t)]
    reached = sum(isinstance(t, str) for t in texts.values())
    if not reached:
        return [], f"none of the {len(eps)} metrics endpoint(s) answered the head"
    return fams, f"{reached} of {len(eps)} endpoint(s) scraped directly"


# --------------------------------------------------------------------------- per node
# Per-node use from Ray's Prometheus metrics: GPU utilisation and memory, CPU, RAM, network.
#
# The names and labels are Ray's own (``dashboard/modules/reporter/reporter_agent.py``, Ray 2.52-2.60):
# ``ray_node_gpus_utilization`` (percent) and ``ray_node_gram_used`` / ``ray_node_gram_available``
# (MiB, whatever their HELP text says: Ray divides NVML's bytes by 2**20) per ``GpuIndex``;
# ``ray_node_cpu_utilization`` (percent), ``ray_node_mem_used`` / ``ray_node_mem_total`` (bytes),
# ``ray_node_network_send_speed`` / ``ray_node_network_receive_speed`` (bytes/s); each sample carries
# the node's ``ip``. A node without GPUs (or whose GPUs NVML cannot see) has no GPU samples: its
# ``gpus`` list is empty, which is not the same as idle GPUs.
_NODE = {
    "ray_node_cpu_utilization": "cpu_percent",
    "ray_node_mem_used": "mem_used",
    "ray_node_mem_total": "mem_total",
    "ray_node_network_send_speed": "net_send_bps",
    "ray_node_network_receive_speed": "net_recv_bps",
}
_GPU = {
    "ray_node_gpus_utilization": "util_percent",
    "ray_node_gram_used": "mem_used_mib",
    "ray_node_gram_available": "mem_free_mib",
}


def per_node(families: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """``{ip: {"cpu_percent", "mem_used", "mem_total", "net_send_bps", "net_recv_bps",
    "gpus": [{"index", "name", "util_percent", "mem_used_mib", "mem_total_mib"}]}}``.

    ``families`` are parsed metric families (``prometheus_client`` Metric objects, or anything
    with ``name`` and ``samples`` of ``(name, labels, value)``). The last sample of a series wins.
    """
    nodes: dict[str, dict[str, Any]] = {}
    gpus: dict[tuple[str, str], dict[str, Any]] = {}
    for fam in families:
        key, gkey = _NODE.get(fam.name), _GPU.get(fam.name)
        if not key and not gkey:
            continue
        for s in fam.samples:
            labels, value = s[1], float(s[2])
            ip = labels.get("ip")
            if not ip:
                continue
            node = nodes.setdefault(ip, {"gpus": []})
            if key:
                node[key] = value
            elif labels.get("GpuIndex") is not None:
                g = gpus.setdefault((ip, labels["GpuIndex"]), {"index": int(labels["GpuIndex"]),
                                                               "name": labels.get("GpuDeviceName")})
                g[gkey] = value
    for (ip, _), g in sorted(gpus.items(), key=lambda kv: (kv[0][0], kv[1]["index"])):
        if "mem_used_mib" in g and "mem_free_mib" in g:
            g["mem_total_mib"] = g["mem_used_mib"] + g.pop("mem_free_mib")
        nodes[ip]["gpus"].append(g)
    return nodes
