"""rayjobs: run many verl PPO/GRPO experiments on one long-lived Ray cluster.

The Python API (the ``rayjobs`` command line is a thin layer over it), from :mod:`rayjobs.api`::

    import rayjobs
    job = rayjobs.submit_experiment("ppo_gsm8k_qwen05b", ["trainer.total_epochs=1"])
    job.wait()

* :func:`submit_experiment` / :func:`submit_sweep` -> :class:`Job` (status, row, logs, tail, stop, wait)
* :func:`plan_experiment`: the dry-run half (the exact ``submit_job`` requests, no cluster)
* :func:`list_jobs`, :func:`stop_jobs`, :func:`plot_jobs`, :func:`compare_sweep` (a sweep at a glance)
* :func:`evaluate_checkpoints`: the last checkpoint of each point of a sweep, validated (``eval_checkpoint``)
* :func:`effective_settings`: the settings in effect and where each came from (``rayjobs config``)
* :class:`RayjobsError`: every error a user can cause, one line.

The names load lazily, so ``import rayjobs`` (and ``rayjobs --help``) stays instant.
"""

from typing import Any

from rayjobs.shared import __version__

_API = ("Job", "submit_experiment", "submit_sweep", "plan_experiment", "list_jobs", "stop_jobs", "resume_job",
        "evaluate_checkpoints", "plot_jobs", "compare_sweep", "effective_settings", "usage")
__all__ = [*_API, "JobSpec", "RayjobsError", "__version__"]


def __getattr__(name: str) -> Any:
    if name in _API:
        from rayjobs import api

        return getattr(api, name)
    if name == "JobSpec":
        from rayjobs.submit.spec import JobSpec

        return JobSpec
    if name == "RayjobsError":
        from rayjobs.errors import RayjobsError

        return RayjobsError
    raise AttributeError(f"module 'rayjobs' has no attribute {name!r}")
