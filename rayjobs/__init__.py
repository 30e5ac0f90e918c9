"""rayjobs: run many verl PPO/GRPO experiments on one long-lived Ray cluster.

Library surface (the CLI is a thin layer over these):

* :mod:`rayjobs.submit.compose` -- compose a Hydra config (verl's tree + rayjobs presets).
* :mod:`rayjobs.submit.spec` -- :class:`~rayjobs.submit.spec.JobSpec` and :func:`~rayjobs.submit.spec.build_spec` (pure).
* :mod:`rayjobs.client.dashboard` -- the one place that talks to Ray's Jobs SDK.
* :mod:`rayjobs.submit.ledger` -- the local record of every submission.

Heavy imports (ray, hydra) are done lazily so ``rayjobs --help`` stays instant.
"""

__version__ = "0.1.0"
