"""Warm engines (issue 50): the key a job attaches by, where a job is best placed, which kept engines
go and when (rayjobs/oncluster/warmth.py), and the queue's rule that applies them. Pure: no Ray."""

from __future__ import annotations

import shlex

from rayjobs.contract import capacity
from rayjobs.oncluster import scheduler, warmth
from rayjobs.oncluster.warmth import Admitted, Rules, WarmEngine

RUNNER = "python3 -m rayjobs.oncluster.runner -- python3 -m verl.trainer.main_ppo"
TINY = ["actor_rollout_ref.model.path=/s/models/tiny-qwen2", "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.2", "actor_rollout_ref.rollout.max_model_len=128",
        "actor_rollout_ref.rollout.n=8", "actor_rollout_ref.actor.optim.lr=0.0001", "data.max_prompt_length=64",
        "trainer.n_gpus_per_node=1", "trainer.experiment_name=run-1", "'trainer.logger=[console,file]'"]


def ep(*args: str) -> str:
    return " ".join([RUNNER, *args])


# --------------------------------------------------------------------------- the key
def test_the_key_is_the_engine_not_the_run() -> None:
    k = warmth.key_of(ep(*TINY))
    assert len(k) == 16
    # what only the trainer, the run or sampling use does not change it
    other_run = [a.replace("run-1", "run-2").replace("lr=0.0001", "lr=0.1").replace("n=8", "n=4") for a in TINY]
    assert warmth.key_of(ep(*other_run, "actor_rollout_ref.rollout.temperature=0.7")) == k
    assert warmth.key_of(ep(*reversed(TINY))) == k                     # order does not matter
    assert warmth.key_of(ep(*TINY[:1], "++" + TINY[1], *TINY[2:])) == k  # nor +/++


def test_the_engine_settings_the_model_and_the_lengths_change_it() -> None:
    k = warmth.key_of(ep(*TINY))
    for change in ("actor_rollout_ref.model.path=/s/models/other", "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
                   "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "actor_rollout_ref.rollout.enforce_eager=false",
                   "actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.rollout.seed=1", "data.max_prompt_length=512",
                   "trainer.n_gpus_per_node=8", "++actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype=fp8"):
        name = change.partition("=")[0].lstrip("+")
        args = [a for a in TINY if a.partition("=")[0] != name] + [change]
        assert warmth.key_of(ep(*args)) not in ("", k), change


def test_no_key_where_no_warm_engine_can_serve() -> None:
    assert warmth.key_of(ep(*TINY), warm=False) == ""                           # rayjobs.warm=false
    assert warmth.opted_out({"warm": "0"}) and not warmth.opted_out({})
    assert warmth.key_of(ep(*TINY, "actor_rollout_ref.rollout.name=sglang")) == ""
    assert warmth.key_of("python3 train.py " + " ".join(TINY), verl=False) == ""  # not a verl job
    assert warmth.key_of("python3 fake.py " + " ".join(TINY)) == warmth.key_of(ep(*TINY))  # a verl job's own entrypoint
    assert warmth.key_of(ep(*TINY[1:])) == ""                                    # no model
    assert warmth.key_of(ep("'unclosed")) == ""


def test_the_key_reads_the_command_line_as_the_shell_does() -> None:
    quoted = ep(*TINY, shlex.quote("++actor_rollout_ref.model.override_config.attn_implementation=sdpa"))
    assert warmth.engine_settings(shlex.split(quoted))["actor_rollout_ref.model.override_config.attn_implementation"] == "sdpa"
    # a quoted value with spaces: read whole, so two such values never share a key
    kw = "++actor_rollout_ref.rollout.engine_kwargs.vllm.hf_overrides='{\"a\": %d}'"
    k1, k2 = warmth.key_of(ep(*TINY, kw % 1)), warmth.key_of(ep(*TINY, kw % 2))
    assert "" != k1 != k2 != warmth.key_of(ep(*TINY))
    for line in (quoted, ep(*TINY, kw % 1), ep(*TINY, "'a b'", '"c\\"d"')):
        assert warmth._split(line) == shlex.split(line)


# --------------------------------------------------------------------------- engines and rules
def eng(name: str, key: str = "k1", node: str = "n1", idle_since: float = 100.0, attached: str = "",
        held: float = 2.0) -> WarmEngine:
    return WarmEngine(name=name, key=key, model="m", node=node, gpus=("0",), held_gib=held,
                      idle_since=idle_since, attached=attached)


def names(verdicts: list[warmth.Verdict], action: str = "evict") -> list[str]:
    return [v.name for v in verdicts if v.action == action]


def test_prefer_the_node_with_an_idle_engine_of_the_key() -> None:
    engines = [eng("a", node="n2"), eng("b", key="k2", node="n3"), eng("c", node="n4", attached="j9")]
    assert warmth.prefer(["n1", "n2", "n3", "n4"], "k1", engines, running=["j9"]) == ["n2", "n1", "n3", "n4"]
    assert warmth.prefer(["n1", "n2"], "", engines) == ["n1", "n2"]


def test_a_job_that_attaches_keeps_its_engine_any_other_evicts_it() -> None:
    engines = [eng("a")]
    assert warmth.evictions(engines, [Admitted("j2", "k1", ("n1",))], [], now=110) == []
    got = warmth.evictions(engines, [Admitted("j3", "k2", ("n1",))], [], now=110)
    assert [(v.name, v.action) for v in got] == [("a", "evict")]
    assert got[0].why == "j3 was admitted and may use these GPUs (another model or engine settings)"
    assert "does not use a warm engine" in warmth.evictions(engines, [Admitted("j4", "", ("n1",))], [], 110)[0].why
    # a job that may land elsewhere leaves it alone
    assert warmth.evictions(engines, [Admitted("j3", "k2", ("n2",))], [], now=110) == []


def test_two_jobs_of_the_key_on_one_node_one_engine_each_at_most() -> None:
    engines = [eng("a", idle_since=100), eng("b", idle_since=50)]
    got = warmth.evictions(engines, [Admitted("j2", "k1", ("n1",)), Admitted("j3", "k1", ("n1",))], [], 110,
                           Rules(per_node=1))
    assert got == []                                   # both claimed: b (the longest idle) by j2, a by j3
    got = warmth.evictions(engines, [Admitted("j2", "k1", ("n1",)), Admitted("j5", "k2", ("n1",))], [], 110)
    assert names(got) == ["a"]                          # j2 takes b; j5 lands beside a


def test_a_held_engine_stays_one_whose_job_ended_is_released() -> None:
    engines = [eng("a", attached="j1", idle_since=0.0)]
    assert warmth.evictions(engines, [Admitted("j3", "k2", ("n1",))], running=["j1"], now=110) == []
    got = warmth.evictions(engines, [], running=[], now=110)
    assert [(v.name, v.action, v.why) for v in got] == [("a", "release", "its job j1 ended")]


def test_bounded_idle_time_and_per_node() -> None:
    engines = [eng("old", idle_since=10), eng("mid", idle_since=300), eng("new", idle_since=400),
               eng("other", node="n2", idle_since=390)]
    got = warmth.evictions(engines, [], [], now=700, rules=Rules(idle_s=600, per_node=1))
    assert names(got) == ["mid", "old"]                # new kept; old idle 690 s; mid beyond 1 a node
    assert "idle 690 s" in [v.why for v in got if v.name == "old"][0]
    assert "more than 1 idle" in [v.why for v in got if v.name == "mid"][0]
    assert names(warmth.evictions(engines, [], [], 700, Rules(enabled=False))) == ["new", "other", "mid", "old"]


def test_a_job_admitted_before_the_queue_saw_the_engine_evicts_it_later() -> None:
    """The registry is read every 2 s: an engine kept just before a job of another model was admitted
    was not in that pass; wherever that job landed, the engine goes once it is seen."""
    e = WarmEngine(name="a", key="k1", model="m", node="n1", idle_since=100.0, seen_at=105.0)
    got = warmth.evictions([e], [], [], now=106, earlier=[warmth.Earlier("j3", "k2", 103.0)])
    assert got[0].why == "j3 was admitted after it went idle, before the queue saw it, and may use these GPUs"
    # admitted after the queue saw it (that pass decided), before it went idle, or of its key: it stays
    for r in (warmth.Earlier("j3", "k2", 105.5), warmth.Earlier("j3", "k2", 99.0), warmth.Earlier("j2", "k1", 103.0)):
        assert warmth.evictions([e], [], [], now=106, earlier=[r]) == [], r


def test_held_per_node() -> None:
    assert warmth.held_per_node([eng("a"), eng("b", held=1.5), eng("c", node="n2")]) == {"n1": 3.5, "n2": 2.0}


def test_from_info_is_lenient() -> None:
    e = WarmEngine.from_info("x", {"key": "k", "gpus": [0, 1], "held_gib": "2.5", "idle_since": None})
    assert (e.key, e.gpus, e.held_gib, e.idle_since, e.attached) == ("k", ("0", "1"), 2.5, 0.0, "")
    assert warmth.engine_name("k", "abcdef0123456789xyz", ["0", "1"]) == "engine-k-abcdef0123456789-0.1"


# --------------------------------------------------------------------------- the queue's rule
def _with_model(entry, model: str):
    """A schedfakes record (or running entry) whose command line is verl's with ``model``."""
    spec_of = lambda rec: dict(rec.spec, entrypoint=ep(*[f"actor_rollout_ref.model.path={model}"], *TINY[1:]))
    if isinstance(entry, tuple):
        kind, kw = entry
        return kind, dict(kw, rec=kw["rec"].with_(spec=spec_of(kw["rec"])))
    return entry.with_(spec=spec_of(entry))


KEY_A = warmth.key_of(ep("actor_rollout_ref.model.path=/m/a", *TINY[1:]))
KEY_B = warmth.key_of(ep("actor_rollout_ref.model.path=/m/b", *TINY[1:]))


def test_the_queue_reads_a_jobs_key_from_its_command_line() -> None:
    from schedfakes import queued, state

    st = state(_with_model(queued("j1", [1]), "/m/a"), queued("j2", [1]))
    assert st.waiting["j1"].req.warm == KEY_A and st.waiting["j2"].req.warm == ""   # "true" is not verl


def test_the_queue_evicts_in_the_pass_that_admits() -> None:
    from schedfakes import cluster, node, queued, running, state

    st = state(_with_model(queued("j3", [1]), "/m/b"), _with_model(running("j1", [1]), "/m/a"))
    view = cluster(node("n1", 1), node("n2", 1, free=0))
    view = scheduler.ClusterView(view.nodes, view.holdings,
                                 warm=(eng("a", key=KEY_A, node="n1", idle_since=90), eng("b", key=KEY_A, node="n2", attached="j1")))
    d = scheduler.decide(st, view, scheduler.Policy(), now=100.0)
    assert [a.id for a in d.of(scheduler.Admit)] == ["j3"]
    assert [(e.name, e.why) for e in d.of(scheduler.Evict)] == [
        ("a", "j3 was admitted and may use these GPUs (another model or engine settings)")]
    assert d.of(scheduler.Release) == []      # b: j1 still runs and holds it


def test_the_queue_keeps_an_engine_for_the_job_that_attaches() -> None:
    from schedfakes import node, queued, state

    st = state(_with_model(queued("j2", [1]), "/m/a"))
    view = scheduler.ClusterView((node("n1", 1),), warm=(eng("a", key=KEY_A, node="n1"),))
    d = scheduler.decide(st, view, scheduler.Policy(), now=100.0)
    assert [a.id for a in d.of(scheduler.Admit)] == ["j2"] and d.of(scheduler.Evict) == []
    assert "a warm engine of its model is on n1" in d.of(scheduler.Admit)[0].note


def test_an_idle_queue_still_releases_and_ages_out() -> None:
    from schedfakes import node, state

    view = scheduler.ClusterView((node("n1", 1),), warm=(eng("a", idle_since=0.0, attached="gone"),
                                                         eng("b", key="k2", idle_since=1.0)))
    d = scheduler.decide(state(), view, scheduler.Policy(warm=Rules(idle_s=600)), now=1000.0)
    assert [e.name for e in d.of(scheduler.Release)] == ["a"] and [e.name for e in d.of(scheduler.Evict)] == ["b"]


def test_a_blocked_pass_still_evicts_for_what_it_admitted() -> None:
    """The queue switched off (every job starts at once): the rule runs after the pass ends."""
    from schedfakes import node, queued, state

    st = state(_with_model(queued("j3", [1]), "/m/b"))
    view = scheduler.ClusterView((node("n1", 1),), warm=(eng("a", key=KEY_A, node="n1"),))
    d = scheduler.decide(st, view, scheduler.Policy(enabled=False), now=100.0)
    assert [a.id for a in d.of(scheduler.Admit)] == ["j3"] and [e.name for e in d.of(scheduler.Evict)] == ["a"]
