"""A stand-in for ``python3 -m verl.trainer.main_ppo`` where no GPU exists.

It behaves like verl where rayjobs depends on it:
* takes verl's Hydra overrides (``key=value``; unknown keys are fine), plus ``+fake.*`` knobs;
* connects to the Ray cluster like verl (bare ``ray.init()``), runs verl's resource check
  (``ValueError: Total available GPUs X is less than total desired GPUs Y``) and then holds one
  STRICT_PACK placement group of ``{GPU: 1, CPU: 3}`` bundles per node-group
  (``[n_gpus_per_node] * nnodes``) while it "trains" (``+fake.hold_gpus=true``);
* prints verl's console lines the way they arrive through Ray: ANSI-coloured
  ``(TaskRunner pid=..)`` prefix, tqdm ``\\r`` progress, ``np.float64(x)`` values,
  ``Total training steps: N``, a W&B run URL;
* writes verl's file-logger JSONL to the ``VERL_FILE_LOGGER_PATH`` its TaskRunner would see (from
  ``ray_kwargs.ray_init.runtime_env.env_vars``; truncated on start, as verl does);
* saves checkpoints as ``<default_local_dir>/global_step_N`` + ``latest_checkpointed_iteration.txt``
  every ``trainer.save_freq`` steps and resumes from it (``resume_mode=auto``).

Knobs: ``+fake.steps`` (default 5), ``+fake.step_s`` (0.05), ``+fake.fail_at`` (step to crash at,
once per run dir), ``+fake.hold_gpus`` (false), ``+fake.hold_s`` (extra seconds holding the PGs),
``+fake.score_offset`` (0.0, added to the score/reward curves so sweep points differ in plots),
``+fake.score_peak=K`` (the score rises until step K, then falls by 0.05 a step: its best is not its last),
``+fake.gate=PATH`` (hold before the first step until PATH exists, at most 300 s: the test says when to go on).
Faults: ``+fake.fail_every=K`` (crash at each K-th step, once each), ``+fake.die_in_save=N``
(SIGKILL itself in the middle of the save of step N, once), ``+fake.zero_on_resume`` (a resume
exits 0 before any step, as verl at an epoch boundary), ``+fake.reward_error`` (the user's
``custom_reward_function.path`` raises at step 2), ``+fake.config_error`` (omegaconf's error at start).
``trainer.val_only=true`` validates at the step it loaded (``resume_mode=resume_path`` with a
``global_step_N`` path, or the tracker) and exits 0, logging ``val-core/...`` at that step (file and
console), as verl; with ``trainer.val_before_train=false`` it trains, as verl does.
``+fake.actors`` (false; with ``+fake.hold_gpus=true``): one tiny actor per placement-group bundle,
which every step waits on, as verl's driver waits on its workers: a worker node that dies makes the
step raise ``ray.exceptions.ActorDiedError`` (traceback, exit 1), as in verl.
``+fake.worker_mib=N`` (with ``+fake.actors``): each worker "holds N MiB of GPU memory" (a ``pid,N,PATH``
line in ``$FAKE_NVIDIA_SMI_APPS``), which the driver frees ``+fake.worker_free_s`` (default 1.0) after the
worker's process ended, as a CUDA context is torn down after its process is gone (the worker itself
ends as soon as its trainer does, as Ray ends a dead driver's workers): an unmarked watcher
removes PATH then and appends ``<pid> <epoch s> <job id>`` to ``$FAKE_NVIDIA_SMI_APPS.freed``. The workers carry
the ``ray_kwargs.ray_init.runtime_env.env_vars`` the runner gives verl (its job mark), as verl's do.
``+fake.orphan=true``: leave a process behind, as an orphaned vLLM engine does: double-forked into a
session of its own (out of the trainer's process group and tree, so Ray's job cleanup misses it), it
keeps the inherited environment (``RAYJOBS_JOB``), ignores SIGTERM, sleeps for an hour and, where
``$FAKE_NVIDIA_SMI_APPS`` names a file, adds ``pid,5120`` to it: "holding a fake GPU" (tests/workloads/bin/nvidia-smi).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Optional

PID = os.getpid()
PREFIX = f"\x1b[36m(TaskRunner pid={PID})\x1b[0m "


def parse(argv: list[str]) -> dict[str, str]:
    out = {}
    for a in argv:
        if "=" in a:
            k, v = a.split("=", 1)
            out[k.lstrip("+~")] = v.strip("'\"")
    return out


def say(text: str) -> None:
    sys.stdout.write(PREFIX + text + "\n")
    sys.stdout.flush()


def hold_gpus(groups: list[int], env_vars: Optional[dict[str, str]] = None) -> list:
    import ray

    # as verl: ray.init with the runtime_env of ray_kwargs.ray_init (its actors carry those env vars)
    ray.init(logging_level="ERROR", runtime_env={"env_vars": env_vars} if env_vars else None)
    avail = ray._private.state.available_resources_per_node()
    total_avail = sum(n.get("GPU", 0) for n in avail.values())
    need = sum(groups)
    if total_avail < need:  # verl's _check_resource_available, word for word
        raise ValueError(f"Total available GPUs {total_avail} is less than total desired GPUs {need}")
    from ray.util.placement_group import placement_group

    pgs = [placement_group([{"CPU": 3, "GPU": 1}] * g, strategy="STRICT_PACK", name=f"global_poolverl_group_{g}:{i}")
           for i, g in enumerate(groups)]
    ray.get([pg.ready() for pg in pgs])  # verl waits without a timeout
    say(f"placement groups ready: {groups}")
    return pgs


#: How long a step waits for its actors: far longer than Ray takes to declare a dead node's actors
#: dead (its GCS health check, ~15 s), so a lost node ends the step with ActorDiedError, not a
#: timeout; bounded all the same, so a wedged cluster cannot hang a test forever.
ACTOR_STEP_TIMEOUT_S = 300.0


#: ``+fake.worker_mib``'s watcher: once the worker's pid is gone, wait, free its "GPU memory" (remove
#: the file its nvidia-smi line names), say when. Unmarked and in a session of its own: no reap ends it.
FREER = ("import os, sys, time\n"
         "pid, held, wait, log, job = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5]\n"
         "if os.fork():\n"
         "    os._exit(0)\n"
         "os.setsid()\n"
         "end = time.monotonic() + 3600\n"
         "while os.path.exists(f'/proc/{pid}') and time.monotonic() < end:\n"
         "    try:\n"
         "        if open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0] == 'Z':\n"
         "            break\n"
         "    except OSError:\n"
         "        break\n"
         "    time.sleep(0.01)\n"
         "time.sleep(wait)\n"
         "t = time.time()\n"
         "os.unlink(held)\n"
         "with open(log, 'a') as f:\n"
         "    f.write(f'{pid} {t} {job}\\n')\n")


def end_with(pid: int) -> None:
    """End this worker as soon as process ``pid`` (its trainer) has: Ray ends a dead driver's workers,
    mostly before the queue's reap looks; here always before (a thread polling every 10 ms)."""
    import threading

    def watch() -> None:
        while True:
            try:
                if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            except OSError:
                break
            time.sleep(0.01)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def hold_gpu_memory(mib: int, free_s: float) -> None:
    """``+fake.worker_mib``: this worker holds ``mib`` MiB on its fake GPU until ``free_s`` after it ended."""
    import subprocess

    apps = os.environ.get("FAKE_NVIDIA_SMI_APPS")
    if not apps or mib <= 0:
        return
    job = os.environ.get("RAYJOBS_JOB", "-")
    held = f"{apps}.held-{job}-{os.getpid()}"
    open(held, "w").close()
    env = {k: v for k, v in os.environ.items() if k != "RAYJOBS_JOB"}
    subprocess.run([sys.executable, "-c", FREER, str(os.getpid()), held, str(free_s), apps + ".freed", job], env=env,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)
    with open(apps, "a") as f:
        f.write(f"{os.getpid()},{mib},{held}\n")


def start_actors(pgs: list, mib: int = 0, free_s: float = 1.0) -> list:
    """``+fake.actors``: one worker actor in every bundle of ``pgs`` (verl's workers: one per GPU)."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    @ray.remote(max_restarts=0)  # verl's workers are not restarted either
    class FakeWorker:
        def __init__(self, trainer: int) -> None:
            if mib > 0:
                hold_gpu_memory(mib, free_s)
                end_with(trainer)

        def step(self, i: int) -> int:
            return i

        def node_id(self) -> str:
            return ray.get_runtime_context().get_node_id()

    actors = [FakeWorker.options(num_cpus=1, num_gpus=1, scheduling_strategy=PlacementGroupSchedulingStrategy(
                  pg, placement_group_bundle_index=b)).remote(PID)
              for pg in pgs for b in range(pg.bundle_count)]
    nodes = ray.get([a.node_id.remote() for a in actors])  # verl waits for its workers to start
    say(f"worker actors ready: {len(actors)} on node(s) {sorted(set(nodes))}")
    return actors


def step_actors(actors: list, step: int) -> None:
    """One step's work on every actor; a dead actor raises here (ray.get, as verl's driver)."""
    import ray

    ray.get([a.step.remote(step) for a in actors], timeout=ACTOR_STEP_TIMEOUT_S)


#: The orphan of +fake.orphan. A double fork: its parent exits at once, so it is no descendant of the
#: trainer (what Ray's stop looks for) and in a session of its own; deaf to SIGTERM (a hung engine),
#: it says its pid, registers its "GPU memory" and sleeps.
ORPHAN = ("import os, signal, sys, time\n"
          "if os.fork():\n"
          "    os._exit(0)\n"
          "os.setsid()\n"
          "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
          "apps = os.environ.get('FAKE_NVIDIA_SMI_APPS')\n"
          "if apps:\n"
          "    with open(apps, 'a') as f:\n"
          "        f.write(f'{os.getpid()},5120\\n')\n"
          "print(os.getpid(), flush=True)\n"
          "os.dup2(os.open(os.devnull, os.O_WRONLY), 1)\n"
          "time.sleep(3600)\n")


def leave_orphan() -> int:
    """``+fake.orphan=true``: leave a process that outlives this trainer, out of its process tree; its pid."""
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", ORPHAN], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, close_fds=True, text=True)
    pid = int(proc.stdout.readline())
    proc.wait()
    say(f"orphan pid {pid}")
    return pid


def once(ckpt_dir: str, name: str) -> bool:
    """True the first time per run dir (a marker file in the checkpoint dir), so a retry gets past."""
    marker = os.path.join(ckpt_dir or ".", f".{name}")
    os.makedirs(ckpt_dir or ".", exist_ok=True)
    if os.path.exists(marker):
        return False
    open(marker, "w").close()
    return True


def config_error() -> None:
    """``+fake.config_error``: what verl does with a key its config does not have (omegaconf's error)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"trainer": {}})
    OmegaConf.set_struct(cfg, True)
    cfg.trainer.no_such_key  # noqa: B018 (raises omegaconf.errors.ConfigAttributeError)


def reward(args: dict[str, str]) -> None:
    """``+fake.reward_error``: score a sample with the user's ``custom_reward_function.path`` (raises there)."""
    import importlib.util

    path = args.get("reward.custom_reward_function.path") or args["custom_reward_function.path"]
    spec = importlib.util.spec_from_file_location("custom_reward", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.compute_score("gsm8k", "the answer is 4", {"answer": "4"})


def step_faults(args: dict[str, str], step: int, ckpt_dir: str) -> None:
    """``+fake.fail_every=K``: crash at every K-th step, once each; ``+fake.reward_error`` at step 2."""
    every = int(args.get("fake.fail_every", 0))
    if every and step % every == 0 and once(ckpt_dir, f"failed_at_{step}"):
        raise RuntimeError(f"fake crash at step {step}")
    if args.get("fake.reward_error", "false").lower() == "true" and step == 2:
        reward(args)


def save(ckpt_dir: str, tracker: str, step: int, args: dict[str, str]) -> None:
    """verl's save: the step's folder first, the tracker last. ``+fake.die_in_save=N``: SIGKILL
    itself halfway through the save of step N (a shard written, the tracker not), once per run."""
    folder = os.path.join(ckpt_dir, f"global_step_{step}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model_world_size_1_rank_0.pt"), "wb") as f:
        f.write(b"\0" * 4096)
    if int(args.get("fake.die_in_save", 0)) == step and once(ckpt_dir, f"died_in_save_{step}"):
        say(f"saving checkpoint to {folder} ...")
        os.kill(os.getpid(), 9)
    with open(tracker, "w") as f:
        f.write(str(step))
    say(f"local_global_step_folder: {folder}")


#: ``+fake.gate``: the longest a trainer waits for its gate file (then it trains anyway).
GATE_MAX_S = 300.0


def wait_for_gate(path: str) -> None:
    """``+fake.gate=PATH``: hold before the first step until PATH exists (a test decides when the
    run goes on), at most :data:`GATE_MAX_S` s."""
    if not path:
        return
    say(f"waiting for the gate {path}")
    deadline = time.monotonic() + GATE_MAX_S
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.1)


def main() -> int:
    args = parse(sys.argv[1:])
    if args.get("fake.config_error", "false").lower() == "true":
        config_error()
    steps = int(args.get("fake.steps", 5))
    step_s = float(args.get("fake.step_s", 0.05))
    fail_at = int(args.get("fake.fail_at", 0))
    peak = int(args.get("fake.score_peak", steps))
    ckpt_dir = args.get("trainer.default_local_dir", "")
    save_freq = int(args.get("trainer.save_freq", -1))
    nnodes = int(args.get("trainer.nnodes", 1))
    gpn = int(args.get("trainer.n_gpus_per_node", 1))
    renv = "ray_kwargs.ray_init.runtime_env.env_vars."
    with_actors = args.get("fake.actors", "false").lower() == "true"
    env_vars = {k[len(renv):]: v for k, v in args.items() if k.startswith(renv)} if with_actors else {}
    pgs = hold_gpus([gpn] * nnodes, env_vars) if args.get("fake.hold_gpus", "false").lower() == "true" else []
    actors = start_actors(pgs, int(args.get("fake.worker_mib", 0)), float(args.get("fake.worker_free_s", 1.0))) \
        if pgs and with_actors else []
    if args.get("fake.orphan", "false").lower() == "true":
        leave_orphan()

    # Like verl: the file logger lives in the TaskRunner actor, which sees only the env vars of the
    # runtime_env verl gives ray.init (ray_kwargs.ray_init.runtime_env.env_vars), not the driver's.
    metrics_path = args.get("ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH")
    mf = open(metrics_path, "wb") if metrics_path else None  # verl truncates on every start
    start = 0
    tracker = os.path.join(ckpt_dir, "latest_checkpointed_iteration.txt") if ckpt_dir else ""
    resume_from = args.get("trainer.resume_from_path", "")
    if args.get("trainer.resume_mode") == "resume_path" and resume_from:  # verl: a concrete global_step_N
        assert "global_step_" in resume_from, "resume ckpt must specify the global_steps"
        if not os.path.isdir(resume_from):  # verl's load_checkpoint fails on a folder that is not there
            raise FileNotFoundError(f"checkpoint folder {resume_from} does not exist")
        start = int(resume_from.rstrip("/").split("global_step_")[-1])
        say(f"Resuming from {resume_from}")
    elif tracker and os.path.exists(tracker):
        start = int(open(tracker).read().strip())
        say(f"Resuming from {os.path.join(ckpt_dir, f'global_step_{start}')}")
    else:
        say("Training from scratch")
    say("Size of train dataloader: 10, Size of val dataloader: 1")
    say(f"Total training steps: {steps}")
    say(f"wandb run id: {os.environ.get('WANDB_RUN_ID', '-')}, resume: {os.environ.get('WANDB_RESUME', '-')}")
    say("wandb: 🚀 View run at https://wandb.ai/rl-team/verl_examples/runs/fake" + str(PID))
    if start and args.get("fake.zero_on_resume", "false").lower() == "true":
        return 0  # verl resuming at an epoch boundary: no step, exit 0 (verl-project/verl#7401)
    # verl (RayPPOTrainer.fit): with val_before_train (default true) validate at the loaded step, log it,
    # and with val_only return there; val_only without val_before_train trains as usual.
    if args.get("trainer.val_only", "false").lower() == "true" and args.get("trainer.val_before_train", "true").lower() == "true":
        val = {"val-core/openai/gsm8k/reward/mean@1": 0.1 + 0.8 * start / steps + float(args.get("fake.score_offset", 0))}
        say(f"Initial validation metrics: {val}")
        say(" - ".join([f"step:{start}"] + [f"{k}:np.float64({v})" for k, v in val.items()]))  # the console logger
        if mf:
            mf.write(json.dumps({"step": start, "data": val}).encode() + b"\n")
            mf.flush()
        return 0
    wait_for_gate(args.get("fake.gate", ""))
    for step in range(start + 1, steps + 1):
        time.sleep(step_s)
        if actors:
            step_actors(actors, step)
        sys.stdout.write(f"\rTraining Progress: {100 * step // steps}%|{'#' * step}| {step}/{steps}")
        sys.stdout.flush()
        score = 0.1 + 0.8 * min(step, peak) / steps - 0.05 * max(0, step - peak) + float(args.get("fake.score_offset", 0))
        data = {"actor/pg_loss": -0.01 * step, "critic/score/mean": score, "critic/rewards/mean": score - 0.01,
                "actor/ppo_kl": 0.001 * step, "response_length/mean": 100.0 + step, "timing_s/step": step_s,
                "training/global_step": step, "training/epoch": 0}
        if step == steps:
            data["val-core/openai/gsm8k/reward/mean@1"] = score
        line = " - ".join([f"step:{step}"] + [f"{k}:np.float64({v})" if isinstance(v, float) else f"{k}:{v}"
                                              for k, v in data.items()])
        sys.stdout.write("\n")
        say(line)
        if mf:
            mf.write(json.dumps({"step": step, "data": data}).encode() + b"\n")
            mf.flush()
        if ckpt_dir and save_freq > 0 and (step % save_freq == 0 or step == steps):
            save(ckpt_dir, tracker, step, args)
        step_faults(args, step, ckpt_dir)
        if fail_at and step == fail_at:
            marker = os.path.join(ckpt_dir or ".", ".failed_once")
            os.makedirs(ckpt_dir or ".", exist_ok=True)
            if not os.path.exists(marker):
                open(marker, "w").close()
                raise RuntimeError(f"fake crash at step {step}")
    time.sleep(float(args.get("fake.hold_s", 0)))
    say(f"Final validation metrics: {{'val-core/openai/gsm8k/reward/mean@1': {0.9}}}")
    del pgs
    return 0


if __name__ == "__main__":
    sys.exit(main())
