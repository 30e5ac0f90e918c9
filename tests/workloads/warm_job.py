"""A stand-in for a verl job in the CPU tests of issue 50 (tests/test_warm_*.py): what a verl job does
that start-up stamps and warm engines depend on, with no GPU and no verl.

* ``ray.init`` with the ``runtime_env`` verl would pass (``ray_kwargs.ray_init.runtime_env.*``
  overrides: ``env_vars.*`` and ``worker_process_setup_hook``), as verl's ``run_ppo`` does;
* a trainer-like actor (``WorkerDict``) on a ``{GPU: 1}`` bundle that imports ``torch`` (the
  stand-in of ``workloads/faketorch``) and runs its lazy CUDA init, as verl's FSDP worker does;
* ``+warm.model=NAME``: a rollout through :mod:`rayjobs.oncluster.warmengines`: attach to the kept
  engine of the job's key (``$RAYJOBS_WARM_KEY``, from the runner) on its worker's node and GPUs, or
  build one (``StandInEngine``, ``+warm.build_s`` seconds) and keep it asleep at the end (unless
  ``+warm.keep=false``); ``+warm.seed``: the job's seed (its weights and sampling).

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


def engine_class(ray):
    """The stand-in rollout engine: built slowly (``+warm.build_s``), asleep between jobs, with the
    state a kept engine must not carry into the next job: a prefix cache (prompt -> output, filled
    with the weights of the job that generated it) and a sampling RNG. Defined here (``__main__``),
    so Ray ships the class by value to the engine's process."""
    import random

    from rayjobs.oncluster import warmengines

    @ray.remote(num_cpus=0)
    class StandInEngine(warmengines.EngineState):
        def __init__(self, key, model, node, gpus, job, build_s):
            super().__init__(key, model, node, gpus, job)
            time.sleep(build_s)
            self.weights, self.cache, self.rng, self.awake = None, {}, random.Random(0), True

        def ready(self):
            return os.getpid()

        def wake_up(self):
            self.awake = True

        def sleep(self):
            self.awake, self.held_gib = False, 2.0

        def reset_prefix_cache(self):
            self.cache.clear()

        def reseed(self, seed):
            self.rng = random.Random(seed)

        def load_weights(self, weights):
            self.weights = weights

        def generate(self, prompts):
            assert self.awake, "generate on a sleeping engine"
            out = []
            for p in prompts:
                if p not in self.cache:
                    self.cache[p] = self.weights * p
                out.append(self.cache[p] + self.rng.random())
            return out

    return StandInEngine


def rollout(args: dict[str, str], worker, ray) -> float:
    """One rollout through a kept engine (attached) or a new one (kept at the end unless
    ``+warm.keep=false``), the way a verl job's rollout would use it; step 1's score."""
    from rayjobs.oncluster import warmengines, warmth

    key = os.environ.get(warmth.KEY_ENV, "")
    job = os.environ.get("RAYJOBS_JOB") or ray.get_runtime_context().get_job_id()
    node, gpus = ray.get(worker.where.remote())
    engine, why = warmengines.attach(key, node, gpus, job)
    kept = engine is not None
    if engine is None:
        keep = key and args.get("warm.keep", "true") == "true"
        opts = warmengines.keep_options(key, node, gpus) if keep else {}
        cls = engine_class(ray)
        try:
            engine = cls.options(**opts).remote(key, args["warm.model"], node, gpus, job, float(args.get("warm.build_s", "2")))
            ray.get(engine.ready.remote())
            kept = bool(keep)
        except ValueError:  # the name is taken: an engine another job holds; build one of our own
            engine = cls.remote(key, args["warm.model"], node, gpus, job, float(args.get("warm.build_s", "2")))
        print(f"rollout engine built ({why}){'; kept after the job' if kept else ''}", flush=True)
    else:
        print(f"rollout engine attached: {warmth.engine_name(key, node, gpus)}", flush=True)
    seed = int(args.get("warm.seed", "1"))
    ray.get(engine.wake_up.remote())
    ray.get(engine.reset_prefix_cache.remote())   # nothing another job generated is served again
    ray.get(engine.reseed.remote(seed))            # nor its sampling state
    ray.get(engine.load_weights.remote(ray.get(worker.weights.remote(seed))))   # the job's own weights
    outs = ray.get(engine.generate.remote([1, 2, 3, 2, 1]))
    ray.get(engine.sleep.remote())
    if kept:
        ray.get(engine.release.remote(job))
    else:
        ray.kill(engine)
    return round(sum(outs) / len(outs), 6)


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

        def where(self):
            ctx = ray.get_runtime_context()
            return ctx.get_node_id(), [str(g) for g in ctx.get_accelerator_ids().get("GPU", [])]

        def weights(self, seed: int) -> float:
            return 1.0 + seed / 10

    w = WorkerDict.remote()
    pid = ray.get(w.init_model.remote(os.path.join(HERE, "faketorch")))
    print(f"actor and ref model engine initialized (worker pid {pid})", flush=True)
    score = rollout(args, w, ray) if args.get("warm.model") else 0.0
    time.sleep(float(args.get("warm.hold_s", "0")))
    print(f"step:1 - critic/score/mean:{score} - timing_s/step:0.1", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
