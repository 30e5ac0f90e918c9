"""rayjobs: run many verl PPO/GRPO experiments on one long-lived Ray cluster.

Library surface (the CLI is a thin layer over these):

* :mod:`rayjobs.compose` -- compose a Hydra config (verl's tree + rayjobs presets).
* :mod:`rayjobs.spec` -- :class:`~rayjobs.spec.JobSpec` and :func:`~rayjobs.spec.build_spec` (pure).
* :mod:`rayjobs.jobs` -- the one place that talks to Ray's Jobs SDK.
* :mod:`rayjobs.ledger` -- the local record of every submission.

Heavy imports (ray, hydra) are done lazily so ``rayjobs --help`` stays instant.
"""

__version__ = "0.1.0"
