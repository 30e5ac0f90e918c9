"""``python -m rayjobs.submit [-m] +exp=NAME [key=value ...]``: the Hydra app (compose, check, submit).

A single run is composed here and goes through :func:`rayjobs.submit.pipeline.prepare` and
:func:`~rayjobs.submit.pipeline.send`; ``-m`` sweeps go through Hydra's sweeper into the ``rayjobs``
launcher (``hydra_plugins/rayjobs_launcher``), which calls :func:`run_points` with every point. A
preset marked ``rayjobs.evaluate`` (``+exp=eval_checkpoint``) is one evaluation per training job its
``rayjobs.after`` names (:mod:`rayjobs.submit.evaluate`).

stdout carries only data: one submission id per line (or the dry-run JSON); chatter goes to stderr.
"""

from __future__ import annotations

import contextlib
import os
import sys
import textwrap
from typing import Any, Iterator, Optional, Sequence

from rayjobs.errors import run_cli
from rayjobs.submit import pipeline
from rayjobs.config import compose
from rayjobs.config.compose import Composed

USAGE = """usage: python -m rayjobs.submit [-m] +exp=NAME [verl.key=value ...] [rayjobs.key=value ...]

Compose a verl experiment (verl's own key names) and submit it as a Ray job.
  -m, --multirun     sweep: one Ray job per point (a=1,2 b=x,y -> 4 jobs), returns at once
  --cfg job          print the composed config and exit (Hydra)
rayjobs keys (rayjobs.KEY=VALUE; what each does: conf/config.yaml):
{keys}
Evaluate a sweep's last checkpoints: +exp=eval_checkpoint rayjobs.after=<sweep id> (one job per point)
Experiments: {experiments}
"""


#: Where run_points puts the ids instead of stdout, while a Python caller asks for them.
_CALLER_IDS: Optional[list[str]] = None


@contextlib.contextmanager
def ids_to_caller() -> Iterator[list[str]]:
    """Within it, the ids of what is submitted (by Hydra's launcher, for a sweep) go to the list
    it yields, not to stdout; ``rayjobs.follow`` is not followed."""
    global _CALLER_IDS
    saved, _CALLER_IDS = _CALLER_IDS, []
    try:
        yield _CALLER_IDS
    finally:
        _CALLER_IDS = saved


def run_points(points: Sequence[Composed], sweep: bool = False) -> list[str]:
    """prepare + (dry-run print | send + print ids). Returns the ids (empty for dry-run).

    A preset marked ``rayjobs.evaluate`` (``+exp=eval_checkpoint``) is one evaluation job per
    training job its ``rayjobs.after`` names (:mod:`rayjobs.submit.evaluate`).
    """
    rj = points[0].cfg.rayjobs
    if rj.evaluate:
        from rayjobs.errors import ConfigError
        from rayjobs.submit import evaluate  # (it builds on rerun, which builds on pipeline)

        if sweep:
            raise ConfigError(f"+exp={points[0].experiment} is not swept with -m: it already makes one evaluation per "
                              f"job it names; name them all in rayjobs.after=[ID1,ID2] (or a sweep id)")
        ids = evaluate.run(points[0])
        return [] if rj.dry_run else announce(ids, rj, None)  # (it said what it queued)
    prepared = pipeline.prepare(points, sweep=sweep)
    if rj.dry_run:
        print(pipeline.dry_run_report(prepared))
        if rj.preflight:
            print(f"rayjobs: dry run: {len(prepared)} job(s) checked as a submit checks them, nothing submitted; "
                  f"not checked without the cluster: its Ray/verl versions and the per-node GPU fit", file=sys.stderr)
        else:
            print(f"rayjobs: dry run: {len(prepared)} job(s), NOT checked (rayjobs.preflight=false), nothing submitted",
                  file=sys.stderr)
        return []
    if not rj.preflight:
        print("rayjobs: warning: rayjobs.preflight=false, the config was not checked", file=sys.stderr)
    ids = pipeline.send(prepared, address=rj.address)
    sid = prepared[0].spec.meta.sweep
    return announce(ids, rj, f"{len(ids)} jobs (sweep {sid}); see them with: rayjobs list --sweep {sid}")


def announce(ids: list[str], rj: Any, several: Optional[str]) -> list[str]:
    """The ids submitted: to the Python caller (:func:`ids_to_caller`), else one per line on stdout,
    a note on stderr (``several``: what it says of more than one, if anything), and ``rayjobs.follow`` for one."""
    if _CALLER_IDS is not None:  # the Python API (rayjobs.api.submit_sweep) takes the ids itself
        _CALLER_IDS.extend(ids)
        return ids
    for jid in ids:
        print(jid, flush=True)
    if len(ids) == 1:
        print(f"rayjobs: submitted; follow it with: rayjobs tail {ids[0]}", file=sys.stderr)
    elif several:
        print(f"rayjobs: submitted {several}", file=sys.stderr)
    if rj.follow and len(ids) == 1:
        from rayjobs.client.connection import connect
        from rayjobs.views import jobtail

        code = jobtail.tail(connect(rj.address, address_from="rayjobs.address"), ids[0])
        raise SystemExit(code)
    return ids


def _main(argv: Sequence[str]) -> int:
    from hydra._internal.utils import get_args_parser

    args = get_args_parser().parse_args(list(argv))
    if args.help or args.hydra_help:
        from rayjobs.config.schema import own_keys

        keys = textwrap.fill(", ".join(k.removeprefix("rayjobs.") for k in own_keys()), 96,
                             initial_indent="  ", subsequent_indent="  ")
        print(USAGE.format(experiments=", ".join(compose.experiments()), keys=keys))
        return 0
    if args.multirun:
        compose.check_shapes(args.overrides)
        hydra = compose.make_hydra()
        with compose.translate_errors(args.overrides):
            hydra.multirun(config_name=compose.CONFIG_NAME, task_function=no_task, overrides=list(args.overrides))
        return 0
    c = compose.compose(args.overrides)
    if args.cfg:
        from omegaconf import OmegaConf

        print(OmegaConf.to_yaml(c.cfg, resolve=bool(args.resolve)))
        return 0
    run_points([c])
    return 0


def no_task(cfg: Any) -> None:  # pragma: no cover - the rayjobs launcher never runs tasks locally
    raise RuntimeError("the rayjobs launcher submits jobs; it never runs the task locally")


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Console entry point."""
    # Composing builds hundreds of thousands of long-lived OmegaConf nodes; at Python's default
    # thresholds the collector re-scans them over and over (a third of a 50-point sweep's client
    # time, measured). Collect less often: same garbage freed, +1 MB peak for 50 points.
    import gc

    gc.set_threshold(50_000, 20, 100)
    if not os.environ.get("RAYJOBS_DEBUG"):
        import warnings

        # omegaconf 2.4 (the cluster stack's) warns once per resolver Hydra, verl and rayjobs register: ~20
        # lines of stderr on every submit that say nothing about the job
        warnings.filterwarnings("ignore", message=r".*register_new_resolver")
        # and once per compose that Hydra stores its version_base as a Version object, not a str
        warnings.filterwarnings("ignore", message=r"Implicit conversion from Version to str")
    sys.exit(run_cli(lambda: _main(sys.argv[1:] if argv is None else argv)) or 0)


def leave(code: Any) -> None:
    """Exit without tearing the heap down object by object.

    A 50-point sweep leaves ~50 composed verl configs (millions of small objects); Python's own
    teardown of them took 2.2 s of a 8 s sweep submit (measured). Everything is on disk or sent by
    now, so run the exit hooks, flush, and leave.
    """
    import atexit

    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
