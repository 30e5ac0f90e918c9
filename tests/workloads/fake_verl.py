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
``+fake.score_offset`` (0.0, added to the score/reward curves so sweep points differ in plots).
"""

from __future__ import annotations

import json
import os
import sys
import time

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


def hold_gpus(groups: list[int]) -> list:
    import ray

    ray.init(logging_level="ERROR")
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


def main() -> int:
    args = parse(sys.argv[1:])
    steps = int(args.get("fake.steps", 5))
    step_s = float(args.get("fake.step_s", 0.05))
    fail_at = int(args.get("fake.fail_at", 0))
    ckpt_dir = args.get("trainer.default_local_dir", "")
    save_freq = int(args.get("trainer.save_freq", -1))
    nnodes = int(args.get("trainer.nnodes", 1))
    gpn = int(args.get("trainer.n_gpus_per_node", 1))
    pgs = hold_gpus([gpn] * nnodes) if args.get("fake.hold_gpus", "false").lower() == "true" else []

    # Like verl: the file logger lives in the TaskRunner actor, which sees only the env vars of the
    # runtime_env verl gives ray.init (ray_kwargs.ray_init.runtime_env.env_vars), not the driver's.
    metrics_path = args.get("ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH")
    mf = open(metrics_path, "wb") if metrics_path else None  # verl truncates on every start
    start = 0
    tracker = os.path.join(ckpt_dir, "latest_checkpointed_iteration.txt") if ckpt_dir else ""
    if tracker and os.path.exists(tracker):
        start = int(open(tracker).read().strip())
        say(f"Resuming from {os.path.join(ckpt_dir, f'global_step_{start}')}")
    else:
        say("Training from scratch")
    say("Size of train dataloader: 10, Size of val dataloader: 1")
    say(f"Total training steps: {steps}")
    say("wandb: 🚀 View run at https://wandb.ai/rl-team/verl_examples/runs/fake" + str(PID))
    for step in range(start + 1, steps + 1):
        time.sleep(step_s)
        sys.stdout.write(f"\rTraining Progress: {100 * step // steps}%|{'#' * step}| {step}/{steps}")
        sys.stdout.flush()
        score = 0.1 + 0.8 * step / steps + float(args.get("fake.score_offset", 0))
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
            os.makedirs(os.path.join(ckpt_dir, f"global_step_{step}"), exist_ok=True)
            with open(tracker, "w") as f:
                f.write(str(step))
            say(f"local_global_step_folder: {os.path.join(ckpt_dir, f'global_step_{step}')}")
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
