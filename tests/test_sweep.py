"""Sweeps (``python -m rayjobs.submit -m ...``): Hydra's syntax, one job per point, all-or-nothing, no waiting."""

from __future__ import annotations

import itertools
import json
import re
import time

from conftest import rayjobs_cli, rayjobs_submit, wait_terminal
from test_submit import submitted


def dry_points(workdir, *args):
    r = rayjobs_submit("-m", "+exp=fake_ppo", "rayjobs.dry_run=true", *args, cwd=workdir)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    return doc if isinstance(doc, list) else [doc]


def arg(entrypoint: str, key: str) -> str:
    m = re.search(rf"(?:^| ){re.escape(key)}=(\S+)", entrypoint)
    return m.group(1) if m else ""


def test_cartesian_product_of_lists_ranges_and_choices(workdir):
    pts = dry_points(workdir, "trainer.total_epochs=range(1,3)", "algorithm.kl_ctrl.kl_coef=0.001,0.01",
                     "data.train_batch_size=choice(64,128)")
    assert len(pts) == 8
    jobs = [p["submit_job"] for p in pts]
    combos = {(arg(j["entrypoint"], "trainer.total_epochs"), arg(j["entrypoint"], "algorithm.kl_ctrl.kl_coef"),
               arg(j["entrypoint"], "data.train_batch_size")) for j in jobs}
    assert combos == set(itertools.product(["1", "2"], ["0.001", "0.01"], ["64", "128"]))
    sweep = jobs[0]["metadata"]["sweep"]
    assert sweep and all(j["metadata"]["sweep"] == sweep for j in jobs)
    assert [j["submission_id"] for j in jobs] == [f"{sweep}-{i}" for i in range(8)]
    names = {arg(j["entrypoint"], "trainer.experiment_name") for j in jobs}
    ckpts = {j["metadata"]["checkpoint_dir"] for j in jobs}
    assert len(names) == 8 and len(ckpts) == 8 and all(n.startswith(sweep + "_") for n in names)
    assert all(arg(j["entrypoint"], "trainer.default_local_dir") == j["metadata"]["checkpoint_dir"] for j in jobs)
    one = next(j for j in jobs if arg(j["entrypoint"], "trainer.total_epochs") == "2"
               and arg(j["entrypoint"], "algorithm.kl_ctrl.kl_coef") == "0.01" and arg(j["entrypoint"], "data.train_batch_size") == "128")
    assert json.loads(one["metadata"]["sweep_overrides"]) == ["trainer.total_epochs=2", "algorithm.kl_ctrl.kl_coef=0.01",
                                                             "data.train_batch_size=128"]


def test_sweep_over_experiments_composes_each_in_full(workdir):
    (workdir / "conf" / "exp" / "fake_ppo_big.yaml").write_text(
        "# @package _global_\ndefaults:\n  - fake_ppo\ntrainer:\n  n_gpus_per_node: 2\n")
    r = rayjobs_submit("-m", "+exp=fake_ppo,fake_ppo_big", "rayjobs.dry_run=true", cwd=workdir)
    assert r.returncode == 0, r.stderr
    pts = json.loads(r.stdout)
    assert [p["experiment"] for p in pts] == ["fake_ppo", "fake_ppo_big"]
    assert [p["submit_job"]["metadata"]["gpu_groups"] for p in pts] == ["[1]", "[2]"]


def test_one_bad_point_submits_nothing(cluster, client, workdir):
    before = submitted(cluster)
    r = rayjobs_submit("-m", "+exp=fake_ppo", "trainer.nnodes=1,two", cwd=workdir)
    assert r.returncode == 2 and r.stdout == ""
    assert "trainer.nnodes" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = rayjobs_submit("-m", "+exp=fake_ppo", "trainer.total_epochz=1,2", cwd=workdir)
    assert r.returncode == 2 and r.stdout == "" and "total_epochs" in r.stderr
    assert submitted(cluster) == before


def test_sweep_returns_at_once_and_prints_only_ids(cluster, client, workdir):
    t = time.monotonic()
    r = rayjobs_submit("-m", "+exp=fake_ppo", "+fake.steps=1000", "+fake.step_s=1", "trainer.total_epochs=1,2,3", cwd=workdir)
    took = time.monotonic() - t
    assert r.returncode == 0, r.stderr
    ids = r.stdout.split("\n")[:-1]
    assert len(ids) == 3 and all(re.fullmatch(r"fake_ppo-\d{8}-\d{6}-[0-9a-f]{4}-\d", i) for i in ids)
    try:
        # rayjobs' view, not Ray's: the submit returns once the queue holds the points, and one may
        # be admitted before Ray knows its id (shown PENDING)
        rows = json.loads(rayjobs_cli("list", "--json", cwd=workdir).stdout)
        statuses = {row["id"]: row["status"] for row in rows if row["id"] in ids}
        assert set(statuses) == set(ids), rows
        assert all(s in ("PENDING", "RUNNING") for s in statuses.values()), statuses  # 1000 s jobs: it did not wait
        assert "rayjobs list --sweep" in r.stderr and took < 120
    finally:
        stopped = rayjobs_cli("stop", *ids, "--wait", "120", cwd=workdir)
        assert stopped.returncode == 0, stopped.stderr
        for i in ids:
            wait_terminal(client, i, timeout=120)
