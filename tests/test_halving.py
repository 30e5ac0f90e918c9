"""Successive halving, pure: the promotion rule (rayjobs.oncluster.halving) and the queue's rule that
applies it (scheduler.halve_at_rungs) on hand-built states; the keys' checks at submit."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from schedfakes import NOW, cluster, node, running, state  # noqa: E402

from rayjobs.contract.halving import Halving  # noqa: E402
from rayjobs.oncluster.halving import judge, rungs_due, value_at  # noqa: E402
from rayjobs.oncluster.scheduler import Policy, Rung, decide  # noqa: E402

H = Halving("score", (2, 4), "max", 1 / 3)


def test_the_first_point_at_a_rung_goes_on_and_a_later_one_is_ranked_on_those_before_it() -> None:
    assert judge(H, 2, 0.5, []).goes_on  # alone at the rung: rank 1 of 1
    v = judge(H, 2, 0.4, [0.5, 0.6])
    assert (v.rank, v.of, v.goes_on) == (3, 3, False) and v.text() == "halved at step 2: 0.4, rank 3 of 3"
    assert judge(H, 2, 0.7, [0.5, 0.6]).goes_on  # the best so far
    # top ceil(keep * n): of 4 points at the rung, the best 2 go on
    assert [judge(H, 2, x, [0.1, 0.2, 0.3]).goes_on for x in (0.35, 0.25, 0.15)] == [True, True, False]


def test_ties_rank_alike_and_min_mode_prefers_lower() -> None:
    tie = judge(H, 2, 0.5, [0.5, 0.5])
    assert tie.rank == 1 and tie.goes_on
    low = Halving("loss", (2,), "min", 0.5)
    assert judge(low, 2, 0.1, [0.3, 0.2]).goes_on and not judge(low, 2, 0.4, [0.3, 0.2, 0.1]).goes_on


def test_the_value_at_a_rung_is_the_last_logged_at_or_before_it_once_the_run_is_past_it() -> None:
    hist = {1: {"score": 0.1}, 2: {"x": 1.0}, 3: {"score": 0.3}}
    assert value_at(hist, "score", 2) == (True, 0.1)  # step 2 logged no score: the last before it
    assert value_at(hist, "score", 4) == (False, None)  # not there yet
    assert value_at(hist, "nope", 2) == (True, None)  # reached, the metric never logged
    assert rungs_due(H, {1: {"score": 0.1}, 4: {"score": 0.4}}, judged=[]) == [(2, 0.1), (4, 0.4)]
    assert rungs_due(H, {4: {"score": 0.4}}, judged=[2]) == [(4, 0.4)]
    assert judge(H, 2, None, [0.9]).goes_on  # a metric it does not log cannot halve it


def _point(job_id: str, history: dict, **kw):
    entry = running(job_id, [1], sweep="s", halving=H.to_json(), **kw)
    return entry, job_id, history


def _state(*points):
    st = state(*(e for e, _, _ in points))
    for _, job_id, hist in points:
        st.running[job_id].history = hist
    return st


def test_the_queue_halves_a_point_below_the_top_third_and_judges_each_rung_once() -> None:
    st = _state(_point("s-0", {2: {"score": 0.9}}), _point("s-1", {2: {"score": 0.5}}), _point("s-2", {2: {"score": 0.1}}))
    d = decide(st, cluster(node("n0", 4)), Policy(), NOW)
    got = {a.id: (a.verdict.rank, a.verdict.of, a.verdict.goes_on) for a in d.of(Rung)}
    # judged in id order, each against the points before it in this pass: s-0 alone goes on; of 2 and
    # of 3, only the top ceil(n / 3) = 1 does
    assert got == {"s-0": (1, 1, True), "s-1": (2, 2, False), "s-2": (3, 3, False)}
    for r in st.running.values():  # what the service records: the rung is judged, not again
        r.rec = r.rec.with_(rungs={"2": r.history[2]["score"]})
        st.reached("s", 2, r.id, r.history[2]["score"])
    assert not decide(st, cluster(node("n0", 4)), Policy(), NOW).of(Rung)


def test_a_point_that_failed_before_a_rung_is_not_counted_and_a_resumed_or_stopped_one_not_judged() -> None:
    st = _state(_point("s-0", {2: {"score": 0.9}}), _point("s-1", {2: {"score": 0.1}}, stop_asked=True))
    st.done["s-2"] = "FAILED"  # failed at step 1: never at the rung, not in the ladder
    d = decide(st, cluster(node("n0", 4)), Policy(), NOW)
    assert [a.id for a in d.of(Rung)] == ["s-0"] and d.of(Rung)[0].verdict.of == 1
    resumed = running("s-3-r1", [1], sweep="s", halving=H.to_json(), resumed_from="s-3")
    st2 = state(resumed)
    st2.running["s-3-r1"].history = {2: {"score": 0.0}}
    st2.reached("s", 2, "s-0", 0.9)
    st2.reached("s", 2, "s-1", 0.8)
    assert not decide(st2, cluster(node("n0", 4)), Policy(), NOW).of(Rung)  # its user chose to go on


def test_a_halved_point_is_asked_to_stop_at_its_rungs_checkpoint(tmp_path) -> None:
    """The queue's request names the rung: the runner's watch then takes the rung's own checkpoint,
    though steps were trained past it (:mod:`rayjobs.oncluster.checkpointwatch`)."""
    import json

    from rayjobs.contract.paths import STOP_REQUEST
    from rayjobs.oncluster.rungs import Rungs

    st = _state(_point("s-0", {2: {"score": 0.9}}, storage=str(tmp_path)),
                _point("s-1", {2: {"score": 0.5}, 3: {"score": 0.6}}, storage=str(tmp_path)))
    rungs, stopped = Rungs(lambda rec: rec, lambda job_id: stopped.append(job_id)), []
    for a in decide(st, cluster(node("n0", 4)), Policy(), NOW).of(Rung):
        rungs.at_rung(st, st.running[a.id], a.verdict, NOW)
    req = json.loads((tmp_path / "runs" / "p" / "s-1" / STOP_REQUEST).read_text())
    assert (req["job_id"], req["at_step"], req["reason"]) == ("s-1", 2, "halved at step 2: 0.5, rank 2 of 2")
    assert not (tmp_path / "runs" / "p" / "s-0" / STOP_REQUEST).exists() and not stopped
    assert st.running["s-1"].rec.halved["rung"] == 2 and st.running["s-1"].stop_asked


def test_a_sweep_without_halving_is_never_judged() -> None:
    st = state(running("s-0", [1], sweep="s"))
    st.running["s-0"].history = {10: {"score": 0.0}}
    assert not decide(st, cluster(node("n0", 4)), Policy(), NOW).of(Rung)


@pytest.mark.parametrize("args, needle", [
    (["rayjobs.halving.rungs=[2,4]"], "rayjobs.halving.metric is not"),
    (["rayjobs.halving.metric=score", "rayjobs.halving.rungs=[4,2]"], "increasing and positive"),
    (["rayjobs.halving.metric=score"], "rayjobs.halving.rungs=[]"),
    (["rayjobs.halving.metric=score", "rayjobs.halving.rungs=[2]", "rayjobs.halving.keep=1.5"], "between 0 and 1"),
    (["rayjobs.halving.metric=score", "rayjobs.halving.rungs=[2]", "rayjobs.halving.mode=best"], "max (higher is better) or min"),
    (["rayjobs.halving.metric=score", "rayjobs.halving.rungs=[two]"], "rayjobs.halving.rungs"),
])
def test_bad_halving_keys_are_one_line(args, needle, tmp_path) -> None:
    from conftest import rayjobs_submit

    r = rayjobs_submit("+exp=ppo_gsm8k_qwen05b", "trainer.logger=[console]", "rayjobs.dry_run=true", *args, cwd=tmp_path)
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1 and needle in errors[0], r.stderr


def test_a_halving_sweep_starts_its_points_in_a_shuffled_order_fixed_by_its_id() -> None:
    from dataclasses import replace

    from schedfakes import queued

    from rayjobs.oncluster.request import shuffled_place
    from rayjobs.oncluster.scheduler import Admit

    def first_admitted(sweep: str, halving: str) -> list[str]:
        st = state(*(queued(f"{sweep}-{i}", [1], sweep=sweep, halving=halving) for i in range(8)))
        order = []
        for _ in range(8):  # one free GPU a pass: the head of the line goes
            (a,) = decide(st, cluster(node("n0", 1)), Policy(), NOW).of(Admit)
            order.append(a.id)
            st.take(a.id)
        return order

    for sweep in ("sw1", "sw2"):
        want = sorted((f"{sweep}-{i}" for i in range(8)), key=lambda j: shuffled_place(sweep, int(j.rsplit("-", 1)[1])))
        got = first_admitted(sweep, H.to_json())
        assert got == want and got != [f"{sweep}-{i}" for i in range(8)], got  # (a hash order, not the grid's)
        assert first_admitted(sweep, H.to_json()) == got  # the same after a restart: from the records alone
    in_order = [f"sw1-{i}" for i in range(8)]
    assert first_admitted("sw1", replace(H, shuffle=False).to_json()) == in_order
    assert first_admitted("sw1", "") == in_order  # no halving: the sweep's order
    assert first_admitted("sw1", H.to_json().replace(', "shuffle": true', "")) == in_order  # an older sweep's


def test_one_halving_config_the_keys_are_the_contracts(monkeypatch) -> None:
    """``rayjobs.halving.*`` is made from contract.halving.Halving (its fields, its defaults), and
    conf/config.yaml restates those defaults: what a real run gets is the one definition's (keep was
    1/3 in both classes but 0.333 in the file, which won)."""
    from dataclasses import MISSING, field, fields, make_dataclass

    from omegaconf import OmegaConf

    from rayjobs.config import schema

    made = {f.name: f.default for f in fields(schema.HalvingConfig)}
    assert made == {"metric": "", "mode": Halving.mode, "rungs": MISSING, "keep": Halving.keep, "shuffle": Halving.shuffle}
    conf = OmegaConf.load(Path(__file__).parent.parent / "conf" / "config.yaml").rayjobs.halving
    assert {k: conf[k] for k in ("mode", "keep", "shuffle")} == {"mode": Halving.mode, "keep": Halving.keep,
                                                                  "shuffle": Halving.shuffle}
    other = make_dataclass("Other", [("metric", str), ("rungs", tuple), ("mode", str, field(default="min")),
                                     ("keep", float, field(default=0.5)), ("shuffle", bool, field(default=False)),
                                     ("patience", int, field(default=2))], frozen=True)
    monkeypatch.setattr(schema, "Halving", other)  # another field or default there is one here
    assert {f.name: f.default for f in fields(schema._halving_config())} == {
        "metric": "", "mode": "min", "rungs": MISSING, "keep": 0.5, "shuffle": False, "patience": 2}


def test_halving_keys_travel_in_the_metadata(tmp_path) -> None:
    import json

    from conftest import rayjobs_submit

    r = rayjobs_submit("+exp=ppo_gsm8k_qwen05b", "trainer.logger=[console]", "rayjobs.dry_run=true", "rayjobs.preflight=false",
                       "rayjobs.halving.metric=critic/score/mean", "rayjobs.halving.rungs=[2,4]", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    meta = json.loads(r.stdout)["submit_job"]["metadata"]
    assert Halving.from_json(meta["halving"]) == Halving("critic/score/mean", (2, 4), "max", 0.333, shuffle=True)
    r = rayjobs_submit("+exp=ppo_gsm8k_qwen05b", "trainer.logger=[console]", "rayjobs.dry_run=true", "rayjobs.preflight=false",
                       "rayjobs.halving.metric=critic/score/mean", "rayjobs.halving.rungs=[2,4]",
                       "rayjobs.halving.shuffle=false", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert not Halving.from_json(json.loads(r.stdout)["submit_job"]["metadata"]["halving"]).shuffle


# --------------------------------------------------------------------------- on a real cluster
def test_a_halved_sweep_stops_the_bottom_points_at_a_checkpoint_and_the_best_succeeds(one_node, workdir) -> None:
    """6 points on 2 fake GPUs, 1 GPU each: at step 4 a point goes on only in the top half of those
    there before it; the others stop at their next checkpoint and the waiting points take their GPUs."""
    from conftest import cli_on, submit_ids, view, wait_done

    offsets = [0.5, 0.0, 0.4, 0.1, 0.3, 0.2]
    ids = submit_ids(one_node, "-m", "+exp=fake_ppo", "+fake.hold_gpus=true", "+fake.steps=24", "+fake.step_s=0.5",
                     "trainer.save_freq=2", f"+fake.score_offset={','.join(map(str, offsets))}",
                     "rayjobs.halving.metric=critic/score/mean", "rayjobs.halving.rungs=[4]", "rayjobs.halving.keep=0.5",
                     "rayjobs.halving.shuffle=false", cwd=workdir)  # (the offsets' order makes losers: no draw)
    assert len(ids) == 6
    status = {i: wait_done(one_node, i, timeout=300) for i in ids}
    views = {i: view(one_node, i) for i in ids}
    best = ids[offsets.index(max(offsets))]
    assert status[best] == "SUCCEEDED", views[best]
    halved = [i for i in ids if views[i].get("halved")]
    assert halved and all(status[i] == "STOPPED" for i in halved), status
    assert set(ids) == set(halved) | {i for i in ids if status[i] == "SUCCEEDED"}, status  # nothing else happened
    assert not [i for i in ids if status[i] == "SUCCEEDED" and views[i].get("halved")]  # ended first: not halved
    for i in halved:
        h = views[i]["halved"]
        assert h["rung"] == 4 and h["rank"] > -(-h["of"] // 2) and h["text"].startswith("halved at step 4: "), h
        ckpt = views[i]["checkpoint_step"]
        assert ckpt is not None and 4 <= ckpt < 24, views[i]  # stopped at a checkpoint after the rung, before the end
        assert views[i]["rungs"] == {"4": h["value"]}
    for i in ids:  # every point reached the rung (the waiting ones started in the halved ones' place)
        assert "4" in views[i]["rungs"], views[i]
    # shuffle=false: they started in the sweep's order (two at once at first)
    assert sorted(ids, key=lambda i: (views[i]["admitted_at"], ids.index(i))) == ids, views
    row = cli_on(one_node, "status", halved[0])
    assert f"STOPPED ({views[halved[0]]['halved']['text']})" in row.stdout, row.stdout
    # A halved point keeps its checkpoint: resumed, it goes on to the end and is not halved again.
    r = cli_on(one_node, "resume", halved[0])
    assert r.returncode == 0, r.stderr
    new = r.stdout.split()[-1]
    assert wait_done(one_node, new, timeout=180) == "SUCCEEDED", view(one_node, new)
    assert not view(one_node, new).get("halved")


def test_a_halving_sweeps_points_start_in_its_shuffled_order(one_node, workdir) -> None:
    """Through the real submit and queue: 6 one-step points on 2 fake GPUs start in the order of
    their places in the sweep's shuffle (a rung they never reach: nothing is halved)."""
    from conftest import submit_ids, view, wait_done

    from rayjobs.contract.meta import point_of
    from rayjobs.oncluster.request import shuffled_place

    ids = submit_ids(one_node, "-m", "+exp=fake_ppo", "+fake.hold_gpus=true", "+fake.steps=1",
                     "+fake.score_offset=0,0.1,0.2,0.3,0.4,0.5", "rayjobs.halving.metric=critic/score/mean",
                     "rayjobs.halving.rungs=[100]", cwd=workdir)
    assert [wait_done(one_node, i, timeout=300) for i in ids] == ["SUCCEEDED"] * 6
    views = {i: view(one_node, i) for i in ids}
    place = {i: shuffled_place(sw := views[i]["metadata"]["sweep"], point_of(i, sw)) for i in ids}
    assert sorted(ids, key=lambda i: (views[i]["admitted_at"], place[i])) == sorted(ids, key=place.get), \
        {i: (views[i]["admitted_at"], place[i]) for i in ids}
