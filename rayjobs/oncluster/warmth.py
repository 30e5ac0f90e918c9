"""Warm engines (issue 50): which kept rollout engine a job may attach to, and which ones go. Pure.

A warm engine is a job's rollout engine (vLLM, asleep: its KV cache and weights given back, ~2 GiB
still held on the GPU) kept alive after its job ended, as a detached Ray actor in the namespace
:data:`NAMESPACE` named by :func:`engine_name` (:mod:`rayjobs.oncluster.warmengines` does the
Ray side). The next job attaches to it instead of building its own only on an exact match:

* its **key** (:func:`key_of`): the model and every engine setting of the job's verl command line
  (parallelism, lengths, memory, dtype, eager/graphs, prefix caching, LoRA, seed, weight-sync
  backend; :data:`ENGINE_KEYS`) -- sampling settings are per request and are not in it;
* the **stack** (verl, vLLM, torch, Python versions), checked by the job on the node;
* the engine is idle (no running job holds it) on the node and GPUs the job's worker got.

The queue keeps a warm engine only while it delays no one (:func:`evictions`): an engine goes the
moment a job is admitted that may land on its node and will not attach to it, once idle for
:attr:`Rules.idle_s`, and beyond :attr:`Rules.per_node` idle engines on a node (the oldest first).
``rayjobs.warm=false`` (metadata ``warm: "0"``): the job neither attaches nor keeps one (key "").
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

#: The Ray namespace of kept engines (every job runs in a namespace of its own; a kept engine
#: outlives its job, so it lives in one the next job can name).
NAMESPACE = "rayjobs-warm"
#: The job's opt-out, as its metadata carries it (``rayjobs.warm=false``).
OPT_OUT_META = "warm"
#: The key the runner hands to the job's processes (its verl actors through the runtime_env).
KEY_ENV = "RAYJOBS_WARM_KEY"

_ROLLOUT = "actor_rollout_ref.rollout."
#: Settings under ``actor_rollout_ref.rollout.`` that shape the engine (verl 0.9.1's vLLMHttpServer
#: launch arguments and what its sleep/sync do); the rest (temperature, n, agent loop, ...) is per request.
ENGINE_KEYS = (
    "name", "mode", "dtype", "load_format", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
    "enable_chunked_prefill", "enable_prefix_caching", "enable_sleep_mode", "free_cache_engine",
    "enforce_eager", "gpu_memory_utilization", "tensor_model_parallel_size", "data_parallel_size",
    "pipeline_model_parallel_size", "expert_parallel_size", "seed", "quantization", "scheduling_policy",
    "cudagraph_capture_sizes", "logprobs_mode", "prompt_length", "response_length", "layered_summon",
    "full_determinism", "enable_rollout_routing_replay", "engine_kwargs", "checkpoint_engine", "mtp",
    "disaggregation", "nnodes", "n_gpus_per_node",
)
#: Other keys that shape the engine: the model, the lengths the engine's max_model_len follows, the
#: GPUs per node a replica spans.
OTHER_KEYS = ("actor_rollout_ref.model.", "data.max_prompt_length", "data.max_response_length",
              "trainer.n_gpus_per_node")


#: One match per token (the queue reads every waiting job's key): ``[+~]key=value`` of an engine key.
_ENGINE_KEY = re.compile(
    r"^[+~]*((?:" + re.escape(_ROLLOUT) + r"(?:" + "|".join(ENGINE_KEYS) + r")(?:\.[^=]*)?"
    + "".join(r"|" + re.escape(o) + (r"[^=]*" if o.endswith(".") else "") for o in OTHER_KEYS) + r"))=(.*)$", re.S)


def engine_settings(argv: Sequence[str]) -> dict[str, str]:
    """The engine-shaping ``key=value`` overrides of a verl command line (``+``/``++`` dropped)."""
    out = {}
    for a in argv:
        m = _ENGINE_KEY.match(a)
        if m:
            out[m.group(1)] = m.group(2).strip("'\"")
    return out


def key_of(entrypoint: str, *, verl: bool = True, warm: bool = True) -> str:
    """The warm key of a job (16 hex digits), or "" when it may not use a warm engine: not a verl
    job (``verl``: its kind, or verl's trainer in its command line), a rollout other than vLLM, no
    model, or ``rayjobs.warm=false`` (``warm``). Two jobs with the same key build the same engine on
    the same stack (verl's defaults fill the rest the same way)."""
    if not warm:
        return ""
    try:
        argv = _split(entrypoint)
    except ValueError:
        return ""
    if not (verl or "verl.trainer.main_ppo" in argv):
        return ""
    settings = engine_settings(argv)
    if settings.get(_ROLLOUT + "name", "vllm") != "vllm" or not settings.get("actor_rollout_ref.model.path"):
        return ""
    blob = json.dumps(sorted(settings.items()), separators=(",", ":"))
    return hashlib.blake2b(blob.encode(), digest_size=8).hexdigest()


def _split(entrypoint: str) -> list[str]:
    """The command line as the shell splits it. ``shlex`` only where a token is quoted: the queue
    reads every job's key (10,000 waiting: ``shlex`` on whole command lines cost ~1-5 ms each)."""
    out = []
    for t in entrypoint.split():
        if "'" in t or '"' in t or "\\" in t:
            plain = _unquoted(t)
            if plain is not None:
                out.append(plain)
                continue
            try:
                parts = shlex.split(t)
            except ValueError:  # a quote spans a space: the whole line, as the shell reads it
                return shlex.split(entrypoint)
            if len(parts) != 1:
                return shlex.split(entrypoint)
            t = parts[0]
        out.append(t)
    return out


def _unquoted(t: str) -> Optional[str]:
    """``'a=b'`` or ``a='b'`` (one pair of quotes, nothing else to interpret) read as the shell does."""
    k, eq, v = t.partition("=") if t[0] not in "'\"" else ("", "", t)
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"" and not any(c in v[1:-1] for c in "'\"\\"):
        if not any(c in k for c in "'\"\\"):
            return k + eq + v[1:-1]
    return None


def opted_out(meta: Mapping[str, str]) -> bool:
    """``rayjobs.warm=false``: the job's metadata says ``warm: "0"``."""
    return str(meta.get(OPT_OUT_META, "1")).strip().lower() in ("0", "false", "no", "off")


def engine_name(key: str, node: str, gpus: Sequence[str]) -> str:
    """The kept engine's actor name: its key, node and GPUs (one engine per key on a set of GPUs)."""
    return f"engine-{key}-{node[:16]}-{'.'.join(str(g) for g in gpus) or 'none'}"


@dataclass(frozen=True)
class WarmEngine:
    """A kept engine as the queue sees it (its actor's ``info()``)."""

    name: str
    key: str
    model: str
    node: str
    gpus: tuple[str, ...] = ()
    held_gib: float = 0.0  #: GPU memory it holds asleep
    idle_since: float = 0.0  #: epoch s it was released (0.0 while a job holds it)
    attached: str = ""  #: the job that holds it, if any
    stack: str = ""
    built_by: str = ""  #: the job that built it
    seen_at: float = 0.0  #: epoch s the queue first saw it (its registry sets it)

    @classmethod
    def from_info(cls, name: str, info: Mapping[str, object]) -> "WarmEngine":
        return cls(name=name, key=str(info.get("key", "")), model=str(info.get("model", "")),
                   node=str(info.get("node", "")), gpus=tuple(str(g) for g in info.get("gpus") or ()),  # type: ignore[union-attr]
                   held_gib=float(info.get("held_gib") or 0.0), idle_since=float(info.get("idle_since") or 0.0),  # type: ignore[arg-type]
                   attached=str(info.get("attached") or ""), stack=str(info.get("stack") or ""),
                   built_by=str(info.get("built_by") or ""))

    def idle(self, running: Iterable[str]) -> bool:
        """Held by no running job (a job that ended without releasing it does not hold it)."""
        return not self.attached or self.attached not in set(running)


@dataclass(frozen=True)
class Rules:
    """The head's limits on kept engines."""

    idle_s: float = 600.0  #: RAYJOBS_WARM_IDLE_S: an engine idle this long goes
    per_node: int = 1  #: RAYJOBS_WARM_PER_NODE: idle engines kept on one node at most
    enabled: bool = True  #: RAYJOBS_WARM: off, every kept engine goes


@dataclass(frozen=True)
class Admitted:
    """A job admitted in this pass: its warm key ("" none) and the nodes it may land on."""

    id: str
    key: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Earlier:
    """A running job admitted before this pass: its key and when (the queue's clock, epoch s)."""

    id: str
    key: str
    admitted_at: float


@dataclass(frozen=True)
class Verdict:
    """What becomes of one kept engine: ``evict`` (why, one line) or ``release`` (its job ended)."""

    name: str
    action: str  #: "evict" | "release"
    why: str


def prefer(nodes: Sequence[str], key: str, engines: Iterable[WarmEngine], running: Iterable[str] = ()) -> list[str]:
    """``nodes`` with those holding an idle engine of ``key`` first (else in their order)."""
    if not key:
        return list(nodes)
    warm = {e.node for e in engines if e.key == key and e.idle(running)}
    return sorted(nodes, key=lambda n: n not in warm)


def _claimed(admitted: Sequence[Admitted], engines: Sequence[WarmEngine], running: set[str]) -> dict[str, str]:
    """engine name -> the admitted job that may attach to it: per job, one idle engine of its key on
    each node it may land on (the longest idle first, so the younger ones stay warm for later jobs)."""
    claimed: dict[str, str] = {}
    for a in admitted:
        if not a.key:
            continue
        for node in a.nodes:
            free = sorted((e for e in engines if e.key == a.key and e.node == node and e.idle(running)
                           and e.name not in claimed), key=lambda e: e.idle_since)
            if free:
                claimed[free[0].name] = a.id
    return claimed


def evictions(engines: Sequence[WarmEngine], admitted: Sequence[Admitted], running: Iterable[str],
              now: float, rules: Rules = Rules(), earlier: Sequence[Earlier] = ()) -> list[Verdict]:
    """Which kept engines go now, and which are released (their job ended), in order.

    An idle engine goes when: kept engines are switched off; a job admitted in this pass may land on
    its node and does not attach to it (it would hold GPU memory beside that job); a job of another
    key was admitted after it went idle but before the queue saw it (``earlier``: where that job
    landed is not known, so wherever it is); it has been idle :attr:`Rules.idle_s`; or it is beyond
    the :attr:`Rules.per_node` youngest idle engines of its node. An engine a running job holds
    stays (that job's GPUs are its own).
    """
    running = set(running)
    out: list[Verdict] = []
    claimed = _claimed(admitted, engines, running) if rules.enabled else {}
    kept: dict[str, list[WarmEngine]] = {}
    for e in sorted(engines, key=lambda e: (-e.idle_since, e.name)):
        if not e.idle(running):
            continue
        if e.attached:
            out.append(Verdict(e.name, "release", f"its job {e.attached} ended"))
        why = "" if e.name in claimed else (_why_evict(e, admitted, earlier, now, rules)
                                            or _why_bound(e, now, rules, len(kept.get(e.node, []))))
        if why:
            out.append(Verdict(e.name, "evict", why))
        elif e.name not in claimed:
            kept.setdefault(e.node, []).append(e)
    return out


def _why_evict(e: WarmEngine, admitted: Sequence[Admitted], earlier: Sequence[Earlier], now: float,
               rules: Rules) -> str:
    if not rules.enabled:
        return "warm engines are switched off (RAYJOBS_WARM=0)"
    lands = [a for a in admitted if e.node in a.nodes]
    if lands:
        a = lands[0]
        why = "another model or engine settings" if a.key and a.key != e.key else \
            "it does not use a warm engine" if not a.key else "another engine of its key serves it"
        return f"{a.id} was admitted and may use these GPUs ({why})"
    idle_at, seen_at = e.idle_since or now, e.seen_at or now
    missed = [r for r in earlier if r.key != e.key and idle_at < r.admitted_at < seen_at]
    if missed:
        return f"{missed[0].id} was admitted after it went idle, before the queue saw it, and may use these GPUs"
    return ""


def _why_bound(e: WarmEngine, now: float, rules: Rules, kept_here: int) -> str:
    since = e.idle_since or now
    if now - since >= rules.idle_s:
        return f"idle {now - since:.0f} s (RAYJOBS_WARM_IDLE_S={rules.idle_s:g})"
    if kept_here >= rules.per_node:
        return f"more than {rules.per_node} idle on its node (RAYJOBS_WARM_PER_NODE); the oldest goes"
    return ""


def held_per_node(engines: Iterable[WarmEngine]) -> dict[str, float]:
    """GiB of GPU memory kept engines hold asleep, per node (what the views show and count)."""
    out: dict[str, float] = {}
    for e in engines:
        out[e.node] = out.get(e.node, 0.0) + e.held_gib
    return out
