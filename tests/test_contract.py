"""The contract between laptop and cluster (rayjobs.contract): metadata, records, paths, the atomic
write, id resolution, the wire classes. Fast tier: no Ray."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from rayjobs.contract import ids, wire
from rayjobs.contract.files import place, read_json, write_atomic
from rayjobs.contract.meta import JobMeta, point_of
from rayjobs.contract.paths import RunPaths, attempt_of, metrics_files
from rayjobs.contract.record import JobRecord
from rayjobs.contract.status import State, Status


def test_metadata_round_trips_through_rays_strings_and_keeps_unknown_keys():
    m = JobMeta(experiment="grpo_7b", priority=5, max_retries=2, preemptible=True, preempt_wait_s=120.5,
                after=("s1",), gpu_groups=(2, 2), overrides=("a=1",), submitted_at="2026-12-03T10:00:00.000+00:00")
    ray = m.to_ray()
    assert all(isinstance(v, str) for v in ray.values())
    assert ray["gpu_groups"] == "[2, 2]" and ray["preemptible"] == "1" and ray["preempt_wait_s"] == "120.5"
    assert "resumed_from" not in ray  # an optional key is absent while empty
    back = JobMeta.from_ray(dict(ray, future_key="x"))
    assert back.with_(extra={}) == m and back.extra == {"future_key": "x"}
    assert back.to_ray()["future_key"] == "x" and back.gpus == 4


@pytest.mark.parametrize("raw,field,want", [
    ({"priority": "high"}, "priority", 0), ({"max_retries": ""}, "max_retries", 0),
    ({"gpu_groups": "[0, 2, -1]"}, "gpu_groups", (2,)), ({"gpu_groups": "nonsense"}, "gpu_groups", ()),
    ({"preemptible": "true"}, "preemptible", True), ({"preempt_wait_s": "soon"}, "preempt_wait_s", 900.0),
])
def test_metadata_is_read_leniently_one_place(raw, field, want):
    assert getattr(JobMeta.from_ray(raw), field) == want


def test_a_sweep_points_index_comes_from_its_id():
    assert point_of("sw-20261203-1-12", "sw-20261203-1") == 12
    assert point_of("other-3", "sw") == 0 and point_of("sw-x", "sw") == 0


def test_a_version_1_record_reads_as_this_version():
    v1 = {"id": "j1", "state": "done", "status": "FAILED", "spec": {"metadata": {"priority": "3"}}, "code": "abc",
          "queued_at": 1.0, "priority": 3, "submitted_at": "", "max_retries": 0, "attempts": 0, "reaped": ["x"],
          "history": [{"lost_at": 2.0}], "some_future": {"k": 1}}
    rec = JobRecord.from_json(v1)
    assert (rec.state, rec.status, rec.meta.priority, rec.reaped, rec.version) == (State.DONE, Status.FAILED, 3, ("x",), 2)
    assert rec.extra == {"some_future": {"k": 1}}  # unknown keys kept; v1's derived copies dropped
    again = JobRecord.from_json(json.loads(json.dumps(rec.to_json())))
    assert again == rec
    with pytest.raises(ValueError):
        JobRecord.from_json({"state": "waiting"})
    with pytest.raises(ValueError):
        JobRecord.from_json({"id": "x", "state": "exploded"})


def test_status_is_read_from_any_of_rays_spellings():
    assert Status.of("JobStatus.RUNNING") is Status.RUNNING and Status.of("stopped") is Status.STOPPED
    assert Status.of(None) is Status.UNKNOWN and Status.SUCCEEDED.terminal and not Status.QUEUED.terminal


def test_a_metadata_list_is_read_whole_or_not_at_all_and_none_is_not_given():
    for bad in ('"a"', '{"a": 1}', "not json", '["a"] trailing'):
        assert JobMeta.from_ray({"overrides": bad, "after": bad}).overrides == () == JobMeta.from_ray({"after": bad}).after
    assert JobMeta.from_ray({"run": None, "user": "u"}) == JobMeta(user="u")


def test_metadata_merged_lays_rays_form_over_and_keeps_the_rest():
    """The runner's admission keys (the queue's go file, Ray's form) over its job's metadata."""
    m = JobMeta.from_ray({"run": "r", "gpu_groups": "[2, 2]", "job_submission_id": "j1", "warm": "0"})
    got = m.merged({"admitted_at": "2026-12-01 10:00:00.000 UTC", "waited_s": "12.50", "max_retries": "x", "extra_k": "v",
                    "user": None})
    assert got.run == "r" and got.gpu_groups == (2, 2) and got.admitted_at.startswith("2026-12-01") and got.waited_s == "12.50"
    assert got.max_retries == 0 and got.user == ""  # leniently read; None is not given
    assert got.submission_id == "j1" == m.submission_id and got.extra == {"job_submission_id": "j1", "warm": "0", "extra_k": "v"}
    assert JobMeta().submission_id == "" and "job_submission_id" not in JobMeta().to_ray()  # Ray's key, not rayjobs'


def test_rays_status_word_is_read_once_and_shows_as_users_see_it():
    from enum import Enum

    from rayjobs.contract.status import word

    class JobStatus(str, Enum):  # Ray's own enum's shape
        RUNNING = "RUNNING"

    assert word(JobStatus.RUNNING) == word("JobStatus.RUNNING") == word("RUNNING") == "RUNNING"
    assert word(None) == "" and word("", "?") == "?" and word("NEWSTATE") == "NEWSTATE"
    assert f"{Status.QUEUED} {Status.FAILED:<8}|" == "QUEUED FAILED  |" and json.dumps([Status.STOPPED]) == '["STOPPED"]'


def test_the_atomic_write_leaves_the_old_file_when_cut_and_sets_its_mode(tmp_path, monkeypatch):
    p = tmp_path / "rec.json"
    write_atomic(p, b"old", mode=0o600)
    assert stat.S_IMODE(p.stat().st_mode) == 0o600

    def cut(fd, data):  # the disk fills mid-write
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", cut)
    with pytest.raises(OSError):
        write_atomic(p, b"new")
    monkeypatch.undo()
    assert p.read_bytes() == b"old" and [x.name for x in tmp_path.iterdir()] == ["rec.json"]  # no stray tmp
    assert read_json(p) is None and read_json(tmp_path / "none") is None
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    assert place(a, b) is False and a.exists()  # another writer's copy won: ours stays where it was


def test_one_did_you_mean_for_the_resolver_and_every_error() -> None:
    """The resolver names the closest ids as every other "no such ..." message does: one function,
    one cut-off (was a second one in ids, cut-off 0.6 and no substring match, that named no id here)."""
    from rayjobs import errors
    from rayjobs.contract import names

    assert errors.did_you_mean is names.did_you_mean and errors.closest is names.closest
    with pytest.raises(ids.NoMatch, match=r"no job matches 'abcd' \(did you mean: run-20260101-abcd\?\)"):
        ids.resolve("abcd", ["run-20260101-abcd", "other-1"])
    assert names.did_you_mean("grpo_7bb", ["grpo_7b", "ppo"]) == " (did you mean: grpo_7b?)"
    assert names.did_you_mean("zzz", ["grpo_7b"]) == ""


def test_ids_resolve_exact_prefix_and_sweep():
    known = ["grpo-1-aaaa", "grpo-1-abbb", "sw-9-0", "sw-9-1", "sw-9-10"]
    sweeps = {"sw-9": ["sw-9-0", "sw-9-1", "sw-9-10"]}
    assert ids.resolve("grpo-1-aaaa", known) == ["grpo-1-aaaa"]
    assert ids.resolve("grpo-1-b", known + ["grpo-1-b"]) == ["grpo-1-b"]  # an exact id wins over its prefix use
    assert ids.resolve("grpo-1-ab", known) == ["grpo-1-abbb"]
    assert ids.resolve("sw-9", known, sweeps) == ["sw-9-0", "sw-9-1", "sw-9-10"]
    assert ids.resolve("sw-9-1", known, sweeps) == ["sw-9-1"]  # the id, not the ids it starts
    with pytest.raises(ids.Ambiguous, match="matches 2 jobs"):
        ids.resolve("grpo-1-a", known)
    with pytest.raises(ids.NoMatch, match=r"did you mean: grpo-1-aaaa"):
        ids.resolve("grpo-1-aaab", known)
    assert ids.resolve("x", [None, "", "x"]) == ["x"]  # a plain driver's empty id is skipped
    # the start of a sweep id starts its points' ids too: it names the sweep (was: "matches 3 jobs")
    assert ids.resolve("sw", known, sweeps) == ["sw-9-0", "sw-9-1", "sw-9-10"]
    with pytest.raises(ids.Ambiguous, match="matches 4 jobs"):  # ... unless another job's id starts with it too
        ids.resolve("sw", known + ["sw-other"], sweeps)


def test_one_resolver_for_sweeps_and_the_local_records_prefixes():
    """views' sweep filters, the local record's lookup and evaluations resolve through contract.ids."""
    assert ids.starting("a-1", ["a-1", "a-10", "b"]) == ["a-1"] and ids.starting("a", ["a-1", "a-10", "b"]) == ["a-1", "a-10"]
    assert ids.resolve_sweep("sw-9", ["sw-9", "sw-90"]) == "sw-9" and ids.resolve_sweep("sw-90", ["sw-9", "sw-90"]) == "sw-90"
    assert ids.resolve_sweep("sw-8", ["sw-9", "sw-80a", ""]) == "sw-80a"
    with pytest.raises(ids.Ambiguous, match=r"'sw' matches 2 sweeps \(sw-8, sw-9\); give more of the id"):
        ids.resolve_sweep("sw", ["sw-9", "sw-8"])
    with pytest.raises(ids.NoMatch, match=r"no sweep 'sx-9' \(did you mean: sw-9\?\); `rayjobs list` shows sweep ids"):
        ids.resolve_sweep("sx-9", ["sw-9"])


def test_run_paths_and_metrics_files(tmp_path):
    run = RunPaths.of(str(tmp_path), "proj", "run1")
    assert run.run_dir == f"{tmp_path}/runs/proj/run1" and run.checkpoint_dir == f"{tmp_path}/checkpoints/proj/run1"
    Path(run.run_dir).mkdir(parents=True)
    for n in (10, 2, 1):
        run.metrics(n).write_text("{}\n")
    (Path(run.run_dir) / "metrics.x.jsonl").write_text("")
    assert list(metrics_files(run.run_dir)) == [1, 2, 10] == list(run.attempts())
    assert attempt_of(run.metrics(7)) == 7 and metrics_files(str(tmp_path / "none")) == {}


def test_wire_objects_round_trip_and_ignore_what_a_newer_head_adds():
    req = wire.EnqueueRequest(jobs=[wire.JobSubmit(entrypoint="true", submission_id="a", metadata={"k": "v"})], code="z1")
    doc = wire.to_json(req)
    assert doc["jobs"][0]["entrypoint"] == "true" and doc["code"] == "z1"
    back = wire.from_json(wire.EnqueueRequest, doc)
    assert back == req
    h = wire.from_json(wire.Health, {"ok": True, "version": "1", "session": "s", "pid": 1, "started_at": 0.0,
                                     "waiting": 0, "admitted": 0, "unreadable": 0, "newer": 1})
    assert h.ok and h.session == "s"
    with pytest.raises(ValueError):
        wire.from_json(wire.Health, {"ok": True})
    assert wire.code_key("ab" * 32) == "z" + "ab" * 16
