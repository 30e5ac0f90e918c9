"""A stand-in for a verl job in the CPU tests of issue 50 (tests/test_warm_*.py): what a verl job does
that start-up stamps and warm engines depend on, with no GPU and no verl.

* ``ray.init`` with the ``runtime_env`` verl would pass (``ray_kwargs.ray_init.runtime_env.*``
  overrides: ``env_vars.*`` and ``worker_process_setup_hook``), as verl's ``run_ppo`` does;
* a trainer-like actor (``WorkerDict``) on a ``{GPU: 1}`` bundle that imports ``torch`` (the
  stand-in of ``workloads/faketorch``) and runs its lazy CUDA init, as verl's FSDP worker does;
* ``+warm.*`` knobs: the rollout engine through :mod:`rayjobs.oncluster.warmengines`
  (``+warm.model=NAME``: attach to a kept engine of that model on this node, or build one —
  :class:`StandInEngine` — and keep it asleep at the end, unless ``+warm.keep=false``).

Prints ``step:1 - ...`` like verl and exits 0.
"""

from __future__ import annotations

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse(argv: list[str]) -> dict[str, str]:
    out = {}
    for a in argv:
        k, sep, v = a.partition("=")
        if sep:
            out[k.lstrip("+~")] = v.strip("'\"")
    return out


def runtime_env(args: dict[str, str]) -> dict:
    """The ``runtime_env`` verl's ``ray.init`` gets from ``ray_kwargs.ray_init.runtime_env.*``."""
    pre = "ray_kwargs.ray_init.runtime_env."
    env: dict = {"env_vars": {}}
    for k, v in args.items():
        if k.startswith(pre + "env_vars."):
            env["env_vars"][k[len(pre + "env_vars."):]] = v
        elif k.startswith(pre):
            env[k[len(pre):]] = v
    return env


def main(argv: list[str]) -> int:
    import ray

    args = parse(argv)
    ray.init(runtime_env=runtime_env(args), logging_level="ERROR")

    @ray.remote(num_gpus=1, num_cpus=0)
    class WorkerDict:
        def init_model(self, faketorch: str) -> int:
            sys.path.insert(0, faketorch)
            import torch

            torch.cuda._lazy_init()
            return os.getpid()

    w = WorkerDict.remote()
    pid = ray.get(w.init_model.remote(os.path.join(HERE, "faketorch")))
    print(f"actor and ref model engine initialized (worker pid {pid})", flush=True)
    score = 0.0
    if args.get("warm.model"):
        from workloads import warm_engine

        score = warm_engine.rollout(args, w)
    time.sleep(float(args.get("warm.hold_s", "0")))
    print(f"step:1 - critic/score/mean:{score} - timing_s/step:0.1", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
