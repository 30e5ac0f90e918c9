"""Where a job's start-up goes (issue 50 item 1): the stamps and the parser that makes the table.

``scripts/gpu/phases.py`` reads followed, ``--epoch``-stamped job logs; the snippets below are
lines of the recorded logs of docs/gpu-e2e.md §10/§13, with the process stamps and vLLM INFO lines
in the forms :mod:`rayjobs.oncluster.warmstamps` and vLLM 0.24 print them. Pure: no Ray, no GPU.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("phases", REPO / "scripts" / "gpu" / "phases.py")
phases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(phases)  # type: ignore[union-attr]

ADM = 1796306762.223  # 2026-12-03 14:06:02.223 UTC
FIRST = [
    "[1796306766.981] [rayjobs] admitted after 0.00 s at 2026-12-03 14:06:02.223 UTC, running from 2026-12-03 14:06:06.926 UTC: 1 group of 1 GPU + 3 CPU on one node",
    "[1796306766.981] [rayjobs] trainer started (pid 2454) at 2026-12-03 14:06:06.933 UTC",
    "[1796306786.859] ray init kwargs: {'num_cpus': None, 'runtime_env': {'env_vars': {}}}",
    "[1796306790.100] \x1b[36m(pid=2587)\x1b[0m [rayjobs-stamp] 1796306787.500 process started",
    "[1796306790.100] \x1b[36m(pid=2587)\x1b[0m [rayjobs-stamp] 1796306789.000 ray worker up",
    "[1796306795.000] (TaskRunnerV1 pid=2587) [rayjobs-stamp] 1796306790.000 import torch begin",
    "[1796306795.000] (TaskRunnerV1 pid=2587) [rayjobs-stamp] 1796306794.500 import torch end",
    "[1796306812.400] (TaskRunnerV1 pid=2587) INFO:2026-12-03 14:06:52,400:create worker group",
    "[1796306830.000] (pid=2700) [rayjobs-stamp] 1796306820.000 process started",
    "[1796306830.000] (pid=2700) [rayjobs-stamp] 1796306821.500 ray worker up",
    "[1796306835.000] (WorkerDict pid=2700) [rayjobs-stamp] 1796306830.000 cuda init begin",
    "[1796306835.000] (WorkerDict pid=2700) [rayjobs-stamp] 1796306832.250 cuda init end",
    "[1796306871.674] (TaskRunnerV1 pid=2587) INFO:2026-12-03 14:07:51,645:actor and ref model engine initialized",
    "[1796306871.774] (TaskRunnerV1 pid=2587) INFO:2026-12-03 14:07:51,745:reward loop manager initialized",
    "[1796306950.000] (vLLMHttpServer pid=3429) (EngineCore pid=3737) INFO 12-03 14:09:10 [default_loader.py:431] Loading weights took 0.05 seconds",
    "[1796306950.100] (vLLMHttpServer pid=3429) (EngineCore pid=3737) INFO 12-03 14:09:10 [gpu_model_runner.py:5256] Model loading took 0.0103 GiB memory and 0.421337 seconds",
    "[1796306960.000] (vLLMHttpServer pid=3429) (EngineCore pid=3737) INFO 12-03 14:09:20 [gpu_worker.py:509] Available KV cache memory: 68.91 GiB",
    "[1796306990.000] (vLLMHttpServer pid=3429) (EngineCore pid=3737) INFO 12-03 14:09:50 [core.py:345] init engine (profile, create kv cache, warmup model) took 9.87 s",
    "[1796306994.000] (TaskRunnerV1 pid=2587) INFO:2026-12-03 14:09:54,000:checkpoint engine manager initialized",
    "[1796306994.100] (vLLMHttpServer pid=3429) INFO 12-03 14:09:54 [abstract.py:328] It took 0.131 seconds to fall asleep.",
    "[1796306994.100] (TaskRunnerV1 pid=2587) INFO:2026-12-03 14:09:54,100:all initialize finished, ready to fit",
    "[1796307043.173] (TaskRunnerV1 pid=2587) step:1 - critic/score/mean:np.float64(0.03789) - timing_s/gen:14.1 - timing_s/update_actor:9.5 - timing_s/step:46.2 - timing_s/update_weights:1.25",
    "[1796307046.702] [rayjobs] attempt finished with exit code 0 after 279.8 s at 2026-12-03 14:10:46.685 UTC",
]


def _write(tmp_path: Path, name: str, lines: list[str]) -> str:
    p = tmp_path / f"{name}.log"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def test_the_phases_end_at_their_marks(tmp_path: Path) -> None:
    log = phases.read(_write(tmp_path, "first", FIRST))
    got = dict(phases.phases(log.found))
    assert got["runner started (Ray job start)"] == pytest.approx(4.703, abs=1e-3)
    assert got["runner -> trainer process"] == pytest.approx(0.007, abs=1e-3)
    assert got["vLLM server(s) up (rollout engine ready)"] == pytest.approx(1796306994.000 - 1796306871.774)
    assert phases.total(log.found) == pytest.approx(1796307043.173 - ADM)
    assert log.step1 == {"critic/score/mean": 0.03789, "timing_s/gen": 14.1, "timing_s/update_actor": 9.5,
                         "timing_s/step": 46.2, "timing_s/update_weights": 1.25}


def test_what_a_kept_engine_and_kept_workers_would_leave(tmp_path: Path) -> None:
    found = phases.read(_write(tmp_path, "first", FIRST)).found
    engine = found["checkpoint engine manager initialized" and "vLLM server(s) up (rollout engine ready)"] \
        - found["reward loop workers"]
    workers = found["workers' imports + FSDP init (weights loaded)"] - found["ray.init + TaskRunner actor up"]
    assert phases.kept(found, phases.KEPT_ENGINE) == pytest.approx(phases.total(found) - engine)
    assert phases.kept(found, phases.KEPT_WORKERS) == pytest.approx(phases.total(found) - engine - workers)


def test_each_process_is_named_by_its_actor_and_timed_by_its_own_stamps(tmp_path: Path) -> None:
    log = phases.read(_write(tmp_path, "first", FIRST))
    rows = dict(phases.process_rows(log))
    assert list(rows) == ["TaskRunnerV1", "WorkerDict"]   # in the order the processes started
    started, worker_init, torch_s, verl_s, vllm_s, cuda_s = rows["TaskRunnerV1"]
    assert started == pytest.approx(1796306787.5 - ADM)
    assert worker_init == pytest.approx(1.5) and torch_s == pytest.approx(4.5)
    assert verl_s is None and vllm_s is None and cuda_s is None
    assert rows["WorkerDict"][5] == pytest.approx(2.25)


def test_vllms_own_durations_are_read(tmp_path: Path) -> None:
    extra = phases.read(_write(tmp_path, "first", FIRST)).extra
    assert extra["weights loaded (s)"] == "0.05"
    assert extra["model loading (s; GiB)"] == "0.0103 GiB; 0.421337"
    assert extra["KV cache memory (GiB)"] == "68.91"
    assert extra["init engine: profile, KV cache, warm-up (s)"] == "9.87"
    assert extra["first sleep (s)"] == "0.131"
    assert "graph capture (s; GiB)" not in extra   # enforce_eager: none captured


def test_two_processes_of_one_class_and_an_unnamed_one(tmp_path: Path) -> None:
    lines = FIRST[:1] + [
        "[1796306790.0] (AgentLoopWorker pid=11) [rayjobs-stamp] 1796306789.000 ray worker up",
        "[1796306790.0] (AgentLoopWorker pid=12) [rayjobs-stamp] 1796306789.500 ray worker up",
        "[1796306790.0] (pid=13) [rayjobs-stamp] 1796306788.000 ray worker up",
    ]
    assert list(phases.read(_write(tmp_path, "x", lines)).roles()) == ["pid 13", "AgentLoopWorker", "AgentLoopWorker #2"]


def test_the_table_side_by_side(tmp_path: Path, capsys) -> None:
    nxt = [ln.replace("step:1 - critic/score/mean:np.float64(0.03789)", "step:1 - critic/score/mean:0.04") for ln in FIRST]
    assert phases.main([f"first={_write(tmp_path, 'first', FIRST)}", f"next={_write(tmp_path, 'next', nxt)}"]) == 0
    out = capsys.readouterr().out
    assert "| **admission -> step 1 logged** | **281.0** | **281.0** |" in out
    assert "| step 1 critic/score/mean | 0.03789 | 0.04 |" in out
    assert "ratio next / first (admission -> step 1): 1.000" in out
    assert "estimate: next with a kept engine / first: 0.565" in out
    assert "| init engine: profile, KV cache, warm-up (s) | 9.87 | 9.87 |" in out
    assert "| TaskRunnerV1 | 25.3 | 1.5 | 4.5 | — | — | — |" in out


def test_the_engines_phase_is_split_by_vllms_own_lines(tmp_path: Path) -> None:
    engine = [
        "[1796306890.000] (vLLMHttpServer pid=3429) ['serve',",
        "[1796306900.000] (vLLMHttpServer pid=3429) INFO 12-03 14:08:20 [model.py:598] Resolved architecture: Qwen2ForCausalLM",
        "[1796306910.000] (vLLMHttpServer pid=3429) (EngineCore pid=3737) INFO 12-03 14:08:30 [core.py:114] Initializing a V1 LLM engine (v0.24.0) with config: model='/m'",
        "[1796306920.000] (vLLMHttpServer pid=3429) (Worker pid=3800) INFO 12-03 14:08:40 [parallel_state.py:1588] world_size=1 rank=0 local_rank=0",
        "[1796306993.900] (vLLMHttpServer pid=3429) (Worker pid=3800) INFO 12-03 14:09:53 [gpu_worker.py:181] Sleep mode freed 15.56 GiB memory, 2.0 GiB memory is still in use.",
    ]
    lines = FIRST[:14] + engine + FIRST[14:]
    log = phases.read(_write(tmp_path, "first", lines))
    rows = dict(phases.engine_rows(log))
    assert rows["server actor: process, imports, verl's config (-> 'serve' args)"] == pytest.approx(1796306890.0 - 1796306871.774)
    assert rows["vLLM config: the model inspected (-> 'Resolved architecture')"] == pytest.approx(10.0)
    assert rows["GPU worker process: spawn, imports, CUDA, dist init"] == pytest.approx(10.0)
    assert rows["weights loaded (dummy: random init)"] == pytest.approx(30.1)          # to "Model loading took"
    assert rows["API server up, first sleep"] == pytest.approx(1796306994.1 - 1796306990.0)
    assert log.extra["GPU memory held asleep (GiB)"] == "2.0"
