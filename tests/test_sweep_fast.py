"""Sweep points derived from the base (rayjobs.config.derive) equal points composed in full (no Ray)."""

from __future__ import annotations

import json
import pickle
from datetime import datetime, timezone

import pytest
from omegaconf import OmegaConf

from rayjobs.errors import ConfigError
from rayjobs.submit import app, pipeline
from rayjobs.config import compose, configcache, derive
from rayjobs.submit.spec import Context, build_spec

BASE = ["+exp=fake_ppo", "trainer.total_epochs=1", "algorithm.kl_ctrl.kl_coef=0.001", "data.train_batch_size=256",
        "rayjobs.priority=0", "trainer.logger=[console]"]


def ctx(i: int, vary: tuple[str, ...]) -> Context:
    return Context(now=datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc), suffix="beef", working_dir="/work/project",
                   git_sha="0" * 40, git_dirty=False, sweep="fake_ppo-20261130-120000-cafe", point=i, sweep_overrides=vary)


def with_values(**changes: str) -> list[str]:
    """BASE with some keys' values changed (a point of a sweep over those keys)."""
    return [f"{o.split('=')[0]}={changes[o.split('=')[0]]}" if o.split("=")[0] in changes else o for o in BASE]


@pytest.fixture
def env(monkeypatch, workdir, tmp_path):
    monkeypatch.setenv("RAYJOBS_STORAGE", "/shared/rayjobs")
    monkeypatch.setenv("RAYJOBS_HOME", str(tmp_path / "home"))
    for var in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(var, "alice")
    return workdir


def launch(monkeypatch, batch: list[list[str]]) -> list[compose.Composed]:
    """The rayjobs launcher's points for ``batch``, as a ``-m`` submit composes them (Hydra's sweep config and all)."""
    hydra = compose.make_hydra()
    from hydra_plugins.rayjobs_launcher.rayjobs_launcher import RayjobsLauncher

    got: list[compose.Composed] = []

    def fake_launch(self, job_overrides, initial_job_idx):
        with compose.memo_interpolations():
            got.extend(self.compose_points([list(o) for o in batch]))
        return []

    monkeypatch.setattr(RayjobsLauncher, "launch", fake_launch)
    with compose.translate_errors(batch[0]):
        hydra.multirun(config_name=compose.CONFIG_NAME, task_function=app.no_task, overrides=list(batch[0]))
    return got


def test_derived_points_equal_points_composed_in_full(env, monkeypatch):
    batch = [BASE]
    batch += [with_values(**{"trainer.total_epochs": str(n)}) for n in (2, 3, 4, 5, 7)]
    batch += [with_values(**{"algorithm.kl_ctrl.kl_coef": v}) for v in ("0.002", "0.005", "0.01", "0.02", "0.1")]
    batch += [with_values(**{"trainer.total_epochs": "9", "algorithm.kl_ctrl.kl_coef": "0.03"})]  # two leaves at once
    batch += [with_values(**{"data.train_batch_size": "64"})]  # a key interpolations read
    batch += [with_values(**{"rayjobs.priority": "5"})]  # one of rayjobs' own keys
    batch += [with_values(**{"trainer.logger": "[console,wandb]"})]  # a list
    points = launch(monkeypatch, batch)
    assert [p.overrides for p in points] == [tuple(b) for b in batch]
    # the plain-leaf points are derived without a tree; the others have one of their own
    assert [derive.is_derived(p) for p in points] == [False] + [True] * 11 + [False] * 3
    vary = pipeline.varying(points)
    fast = [build_spec(p, ctx(i, vary[i])) for i, p in enumerate(points)]
    plains = derive.plain_configs(points)
    for i, p in enumerate(points):
        full = compose.compose(list(p.overrides))
        assert fast[i] == build_spec(full, ctx(i, vary[i])), p.overrides
        assert (p.experiment, p.preset) == (full.experiment, full.preset)
        assert plains[i] == OmegaConf.to_container(full.cfg, resolve=True, throw_on_missing=False)
        assert derive.raw_of(p) == OmegaConf.to_container(full.cfg, resolve=False)
        assert derive.config_yaml(p, pipeline.dump_yaml) == pipeline.dump_yaml(configcache.raw(full.cfg))
        assert OmegaConf.to_container(p.cfg) == OmegaConf.to_container(full.cfg)  # the tree made on demand, too
    assert "kl_coef=0.1" in fast[10].entrypoint and "total_epochs=7" in fast[5].entrypoint
    assert fast[14].runtime_env["env_vars"]["WANDB_RUN_ID"] and fast[13].metadata["priority"] == "5"


def test_writing_shared_trees_equals_json_and_yaml(env, monkeypatch):
    points = launch(monkeypatch, [BASE] + [with_values(**{"trainer.total_epochs": str(n)}) for n in (2, 3)])
    plains = derive.plain_configs(points)
    docs = [{"experiment": p.experiment, "config": c, "n": [i, 1.5, None, True, float("inf")]}
            for i, (p, c) in enumerate(zip(points, plains))]
    assert configcache.SharedJson(plains[0], indent=2, level=2).dumps(docs) == json.dumps(docs, indent=2, default=str)
    assert configcache.SharedJson(plains[0], indent=2, level=1).dumps(docs[1]) == json.dumps(docs[1], indent=2, default=str)
    raws = [derive.raw_of(p) for p in points]
    shared = configcache.SharedJson(raws[0], sort_keys=True)
    assert [shared.dumps(r) for r in raws] == [json.dumps(r, sort_keys=True, default=str) for r in raws]
    assert [derive.config_yaml(p, pipeline.dump_yaml) for p in points] == [pipeline.dump_yaml(r) for r in raws]


def test_a_derived_points_ledger_record_reruns(env, monkeypatch):
    from types import SimpleNamespace

    from rayjobs.submit import rerun

    points = launch(monkeypatch, [BASE, with_values(**{"trainer.total_epochs": "4"})])
    prepared = pipeline.Prepared(points[1], build_spec(points[1], ctx(1, ("trainer.total_epochs=4",))))
    pipeline._record(SimpleNamespace(target=SimpleNamespace(address="http://h:8265", key="h")), prepared)
    rec = rerun.recorded(prepared.spec.submission_id, prepared.spec.metadata)
    assert rec.raw == derive.raw_of(points[1]) and rec.source == "its local record"
    cfg = rerun.apply(rec.raw, ["trainer.total_epochs=9"], address=None, dry_run=True)
    assert cfg.trainer.total_epochs == 9 and cfg.algorithm.kl_ctrl.kl_coef == 0.001


@pytest.mark.parametrize("base, bad", [
    (BASE, with_values(**{"trainer.total_epochs": "two"})),  # verl's type, on a derived point
    (BASE + ["trainer.default_local_dir=/abs"], BASE + ["trainer.default_local_dir=ckpts"]),  # a relative path
    (BASE, with_values(**{"rayjobs.priority": "high"})),  # rayjobs' typed schema
])
def test_a_bad_point_fails_as_composing_it_does(env, monkeypatch, base, bad):
    with pytest.raises(ConfigError) as full:
        compose.compose(bad)
    with pytest.raises(ConfigError) as swept:
        launch(monkeypatch, [base, bad])
    assert str(swept.value) == str(full.value)


def test_a_sweeps_work_does_not_grow_with_its_points(env, monkeypatch):
    """Copies of the config tree (unpickles), full conversions and finish() per sweep: the same for 3 points and 12."""
    counts = {}
    for n in (3, 12):
        calls = {"loads": 0, "to_container": 0, "finish": 0}

        def counting(name, fn):
            def wrapped(*a, **k):
                calls[name] += 1
                return fn(*a, **k)
            return wrapped

        with monkeypatch.context() as m:
            m.setattr(pickle, "loads", counting("loads", pickle.loads))
            m.setattr(OmegaConf, "to_container", staticmethod(counting("to_container", OmegaConf.to_container)))
            m.setattr(compose, "finish", counting("finish", compose.finish))
            points = launch(m, [with_values(**{"trainer.total_epochs": str(k)}) + ["rayjobs.dry_run=true"]
                                for k in range(1, n + 1)])
            prepared = pipeline.prepare(points, sweep=True)
            report = json.loads(pipeline.dry_run_report(prepared))
            [pipeline._config_yaml(p) for p in points]
        assert len(report) == n and [r["config"]["trainer"]["total_epochs"] for r in report] == list(range(1, n + 1))
        counts[n] = calls
    assert counts[3] == counts[12], counts
