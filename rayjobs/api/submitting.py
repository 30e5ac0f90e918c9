"""Submitting: compose, check, queue -- and the dry-run half alone."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

from rayjobs.api.job import Job
from rayjobs.errors import ConfigError

if TYPE_CHECKING:
    from rayjobs.submit.spec import JobSpec


def plan_experiment(experiment: str, overrides: Sequence[str] = ()) -> list["JobSpec"]:
    """The dry-run half of submit: compose and check the experiment; touch no cluster.

    Returns:
        The exact ``submit_job`` request of each job (:class:`~rayjobs.submit.spec.JobSpec`).

    Raises:
        ConfigError: an unknown experiment or key, a wrong value, a failed preflight rule.
    """
    from rayjobs.submit import pipeline
    from rayjobs.config import compose

    return [p.spec for p in pipeline.prepare([compose.compose([f"+exp={experiment}", *overrides])])]


def submit_experiment(experiment: str, overrides: Sequence[str] = (), *, address: Optional[str] = None) -> Job:
    """Compose, check and submit one job (``python -m rayjobs.submit +exp=EXPERIMENT OVERRIDES...``).

    Args:
        experiment: a preset of ``conf/exp/`` (or of ``./conf/exp/``).
        overrides: verl and ``rayjobs.*`` overrides, as on the command line.
        address: the cluster's dashboard (else ``rayjobs.address``, the environment, the connected
            cluster, the embedded local head).

    Raises:
        ConfigError: bad input (nothing submitted). ClusterUnreachable, SubmitError: the cluster.
    """
    from rayjobs.submit import pipeline
    from rayjobs.config import compose

    points = pipeline.prepare([compose.compose([f"+exp={experiment}", *overrides])])
    return Job(pipeline.send(points, address=address or points[0].composed.cfg.rayjobs.address)[0], address=address)


def submit_sweep(experiment: str, overrides: Sequence[str], *, address: Optional[str] = None) -> list[Job]:
    """Submit one job per point of a Hydra sweep (``a=1,2 b=x,y``: four jobs), all checked first."""
    from rayjobs.submit import app
    from rayjobs.config import compose

    args = [f"+exp={experiment}", *overrides] + ([f"rayjobs.address={address}"] if address else [])
    hydra = compose.make_hydra()
    with app.ids_to_caller() as ids, compose.translate_errors(args):
        hydra.multirun(config_name=compose.CONFIG_NAME, task_function=app.no_task, overrides=args)
    if not ids:
        raise ConfigError("nothing was submitted (a dry run?)")
    return [Job(i, address=address) for i in ids]
