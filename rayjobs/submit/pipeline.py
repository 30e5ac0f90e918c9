"""``python -m rayjobs.submit +exp=NAME [key=value ...]``: compose, check, submit (a Hydra app).

Single runs are composed here; ``-m`` sweeps go through Hydra's sweeper into the ``rayjobs``
launcher (``hydra_plugins/rayjobs_launcher``), which calls the same :func:`prepare` and
:func:`send`. Dry-run (``rayjobs.dry_run=true``) is exactly :func:`prepare` without :func:`send`.

stdout carries only data: one submission id per line (or the dry-run JSON); chatter goes to stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

from rayjobs.errors import run_cli
from rayjobs.submit import compose
from rayjobs.submit.compose import Composed
from rayjobs.submit.spec import Context, JobSpec, build_spec, sweep_id

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard

USAGE = """usage: python -m rayjobs.submit [-m] +exp=NAME [verl.key=value ...] [rayjobs.key=value ...]

Compose a verl experiment (verl's own key names) and submit it as a Ray job.
  -m, --multirun     sweep: one Ray job per point (a=1,2 b=x,y -> 4 jobs), returns at once
  --cfg job          print the composed config and exit (Hydra)
rayjobs keys: dry_run, priority, max_retries, entrypoint, working_dir, address, storage, follow, env
Experiments: {experiments}
"""


@dataclass(frozen=True)
class Prepared:
    """One point, ready to submit: its composed config and its JobSpec."""

    composed: Composed
    spec: JobSpec


def git_state(path: str) -> tuple[str, bool]:
    """(sha, dirty) of the git checkout at ``path``; ("", False) outside git."""
    try:
        sha = subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return "", False
        st = subprocess.run(["git", "-C", path, "status", "--porcelain", "--untracked-files=no"],
                            capture_output=True, text=True, timeout=5)
        return sha.stdout.strip(), bool(st.stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        return "", False


def varying(points: Sequence[Composed]) -> list[tuple[str, ...]]:
    """Per point, the overrides that differ between points (what a sweep varies)."""
    if len(points) < 2:
        return [tuple() for _ in points]
    common = set(points[0].overrides).intersection(*[set(p.overrides) for p in points[1:]])
    return [tuple(o for o in p.overrides if o not in common and not o.startswith("hydra.")) for p in points]


def prepare(points: Sequence[Composed], sweep: bool = False) -> list[Prepared]:
    """The first half of submit: build and check every point's JobSpec. No cluster I/O."""
    now = datetime.now().astimezone()
    first = points[0].cfg.rayjobs
    wd = os.path.abspath(os.path.expanduser(str(first.working_dir or os.getcwd())))
    excludes = list(first.excludes)
    # The working_dir check imports Ray (~0.35 s) and walks the dir: in a thread, it overlaps the
    # specs and preflight (whose verl check waits on the helper process, GIL released); a real
    # submit also imports the Jobs SDK there, which send() needs next.
    with ThreadPoolExecutor(max_workers=1) as pool:
        checked = pool.submit(_check_working_dir, wd, excludes, not first.dry_run)
        sha, dirty = git_state(wd)
        sid = sweep_id(points[0].experiment, now, secrets.token_hex(2)) if sweep else None
        out = []
        for i, (c, vary) in enumerate(zip(points, varying(points))):
            ctx = Context(now=now, suffix=secrets.token_hex(2), working_dir=wd, git_sha=sha, git_dirty=dirty,
                          sweep=sid, point=i if sweep else None, sweep_overrides=vary)
            out.append(Prepared(c, build_spec(c, ctx)))
        run_preflight(out)
        checked.result()  # raises for a working_dir Ray would refuse
    return out


def _check_working_dir(wd: str, excludes: list[str], warm_sdk: bool) -> None:
    from rayjobs.submit import workingdir

    workingdir.check(wd, excludes)
    if warm_sdk:
        from rayjobs.client import dashboard

        dashboard.warm_up()  # send() needs the Jobs SDK next: import it here, overlapping the checks


def run_preflight(prepared: Sequence[Prepared]) -> None:
    """Hook for rayjobs.preflight (checks that verl would only make on the GPUs)."""
    try:
        from rayjobs.preflight import checks
    except ImportError:
        return
    checks.check_all(prepared)


def dry_run_report(prepared: Sequence[Prepared]) -> str:
    """What dry-run prints: per point the resolved config and the exact submit request."""
    from omegaconf import OmegaConf

    docs = [{"experiment": p.composed.experiment,
             "config": OmegaConf.to_container(p.composed.cfg, resolve=True),
             "submit_job": p.spec.to_json()} for p in prepared]
    return json.dumps(docs[0] if len(docs) == 1 else docs, indent=2, default=str)


def send(prepared: Sequence[Prepared], address: Optional[str] = None, *, dashboard: Optional["Dashboard"] = None,
         code_of: Optional[str] = None) -> list[str]:
    """The second half of submit: connect, check against the live cluster, queue every point, record.

    Every point goes into the cluster's durable queue in one small Ray job (its working_dir is the
    user's code, so the code travels once and is kept with the backlog); this returns once that
    job has written them (:mod:`rayjobs.oncluster.enqueue`) and the queue has taken them in. The
    queue then submits each to Ray, under the id returned here, when it fits.

    ``dashboard``: an open client (else one for ``address``). ``code_of``: a job id whose durable
    code snapshot the points run with instead of their working_dir (``rayjobs rerun``).
    """
    from rayjobs.client.connection import connect
    from rayjobs.client.queuechannel import enqueue
    from rayjobs.preflight import checks

    d = dashboard or connect(address, address_from="rayjobs.address", quiet=False)
    checks.check_cluster(d, prepared)
    ids = enqueue(d, [p.spec.submit_kwargs() for p in prepared], prepared[0].spec.runtime_env, code_of=code_of)
    for p in prepared:
        _record(d, p)
    return ids


def _record(d: "Dashboard", p: Prepared) -> None:
    """One point in the local record (``rayjobs.submit.ledger``), with its config as YAML."""
    from rayjobs.submit import ledger

    ledger.record(
        {"id": p.spec.submission_id, "experiment": p.composed.experiment, "overrides": list(p.composed.overrides),
         "address": d.target.address, "cluster": d.target.key, "sweep": p.spec.metadata.get("sweep", ""),
         "submitted_at": p.spec.metadata["submitted_at"], "metadata": dict(p.spec.metadata),
         "entrypoint": p.spec.entrypoint, **({"rerun_of": p.spec.metadata["rerun_of"]} if "rerun_of" in p.spec.metadata else {})},
        config_yaml=_yaml(p.composed.cfg),
    )


def _yaml(cfg: Any) -> str:
    """The config as YAML for the ledger (C dumper: a sweep writes one per point)."""
    from rayjobs.submit import configcache

    return dump_yaml(configcache.raw(cfg))


def dump_yaml(data: Any) -> str:
    """Plain data as YAML, keys in order (the ledger's form; ``rayjobs rerun`` reads it back)."""
    import yaml

    class Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
        def ignore_aliases(self, data: Any) -> bool:  # plain copies may share nodes: no &id001 anchors
            return True

    return yaml.dump(data, Dumper=Dumper, sort_keys=False)


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
    """prepare + (dry-run print | send + print ids). Returns the ids (empty for dry-run)."""
    prepared = prepare(points, sweep=sweep)
    rj = points[0].cfg.rayjobs
    if rj.dry_run:
        print(dry_run_report(prepared))
        if rj.preflight:
            print(f"rayjobs: dry run: {len(prepared)} job(s) checked as a submit checks them, nothing submitted; "
                  f"not checked without the cluster: its Ray/verl versions and the per-node GPU fit", file=sys.stderr)
        else:
            print(f"rayjobs: dry run: {len(prepared)} job(s), NOT checked (rayjobs.preflight=false), nothing submitted",
                  file=sys.stderr)
        return []
    if not rj.preflight:
        print("rayjobs: warning: rayjobs.preflight=false, the config was not checked", file=sys.stderr)
    ids = send(prepared, address=rj.address)
    if _CALLER_IDS is not None:  # the Python API (rayjobs.api.submit_sweep) takes the ids itself
        _CALLER_IDS.extend(ids)
        return ids
    for jid in ids:
        print(jid, flush=True)
    if len(ids) == 1:
        print(f"rayjobs: submitted; follow it with: rayjobs tail {ids[0]}", file=sys.stderr)
    else:
        print(f"rayjobs: submitted {len(ids)} jobs (sweep {prepared[0].spec.metadata['sweep']}); "
              f"see them with: rayjobs list --sweep {prepared[0].spec.metadata['sweep']}", file=sys.stderr)
    if rj.follow and len(ids) == 1:
        from rayjobs.views import jobtail

        code = jobtail.follow(ids[0], address=rj.address, address_from="rayjobs.address")
        raise SystemExit(code)
    return ids


def _main(argv: Sequence[str]) -> int:
    from hydra._internal.utils import get_args_parser

    args = get_args_parser().parse_args(list(argv))
    if args.help or args.hydra_help:
        print(USAGE.format(experiments=", ".join(compose.experiments())))
        return 0
    if args.multirun:
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
