"""A submit's two halves: :func:`prepare` (build and check every point's JobSpec; the dry run) and
:func:`send` (check against the live cluster, queue, record).

``python -m rayjobs.submit`` (:mod:`rayjobs.submit.app`) composes single runs and calls them; ``-m``
sweeps go through Hydra's sweeper into the ``rayjobs`` launcher (``hydra_plugins/rayjobs_launcher``),
which calls the same :func:`prepare` and :func:`send`. Dry-run (``rayjobs.dry_run=true``) is exactly
:func:`prepare` without :func:`send`.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Optional, Sequence

from rayjobs.config.compose import Composed
from rayjobs.submit.spec import Context, JobSpec, build_spec, sweep_id

if TYPE_CHECKING:
    from rayjobs.client.dashboard import Dashboard

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
    if points[0].cfg.rayjobs.evaluate:  # its jobs are planned from the cluster's records of the points
        from rayjobs.errors import ConfigError

        raise ConfigError(f"+exp={points[0].experiment} makes one evaluation per job of rayjobs.after, planned from the "
                          f"cluster's record of each: submit it with python -m rayjobs.submit, or from Python with "
                          f"rayjobs.evaluate_checkpoints(...)")
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


def _check_working_dir(wd: str, excludes: list[str], pack: bool) -> None:
    from rayjobs.submit import workingdir

    workingdir.check(wd, excludes)
    if pack:
        from rayjobs.client import codepack

        codepack.pack(wd, excludes)  # send() uploads it next: packed here, overlapping the checks


def run_preflight(prepared: Sequence[Prepared]) -> None:
    """Hook for rayjobs.preflight (checks that verl would only make on the GPUs)."""
    try:
        from rayjobs.preflight import checks
    except ImportError:
        return
    checks.check_all(prepared)


def dry_run_report(prepared: Sequence[Prepared]) -> str:
    """What dry-run prints: per point the resolved config and the exact submit request."""
    from rayjobs.config import configcache, derive

    # A sweep's points share all but their swept leaves: resolve the tree once (not once a point),
    # and write each shared subtree once (json.dumps(indent=2) is pure Python: ~45 KB a point).
    configs = derive.plain_configs([p.composed for p in prepared])
    docs = [{"experiment": p.composed.experiment, "config": c, "submit_job": p.spec.to_json()}
            for p, c in zip(prepared, configs)]
    one = len(docs) == 1
    return configcache.SharedJson(configs[0], indent=2, level=1 if one else 2).dumps(docs[0] if one else docs)


def send(prepared: Sequence[Prepared], address: Optional[str] = None, *, dashboard: Optional["Dashboard"] = None,
         code_of: Optional[str] = None) -> list[str]:
    """The second half of submit: connect, check against the live cluster, queue every point, record.

    Every point goes into the cluster's durable queue in one request to its API (the code goes up
    once per content, and only if the queue lacks it); this returns once the queue holds them on
    disk. The queue then submits each to Ray, under the id returned here, when it fits.

    ``dashboard``: an open client (else one for ``address``). ``code_of``: a job id whose durable
    code snapshot the points run with instead of their working_dir (``rayjobs rerun``).
    """
    import sys

    from rayjobs.client.connection import connect
    from rayjobs.client.queueapi import queue_jobs
    from rayjobs.preflight import checks

    d = dashboard or connect(address, address_from="rayjobs.address", quiet=False)
    checks.check_cluster(d, prepared)
    ids = queue_jobs(d.queue, [p.spec.submit_kwargs() for p in prepared], dict(prepared[0].spec.runtime_env),
                     code_of=code_of, say=lambda msg: print(f"rayjobs: {msg}", file=sys.stderr, flush=True))
    for p in prepared:
        _record(d, p)
    return ids


def _record(d: "Dashboard", p: Prepared) -> None:
    """One point in the local record (``rayjobs.ledger``), with its config as YAML."""
    from rayjobs import ledger

    jm = p.spec.meta
    ledger.record(
        {"id": p.spec.submission_id, "experiment": p.composed.experiment, "overrides": list(p.composed.overrides),
         "address": d.target.address, "cluster": d.target.key, "sweep": jm.sweep,
         "submitted_at": jm.submitted_at, "metadata": dict(p.spec.metadata),
         "entrypoint": p.spec.entrypoint, **({"rerun_of": jm.rerun_of} if jm.rerun_of else {})},
        config_yaml=_config_yaml(p.composed),
    )


def _config_yaml(c: Composed) -> str:
    """A point's config as YAML for the ledger; a derived sweep point's, the base's entries but its own."""
    from rayjobs.config import derive

    return derive.config_yaml(c, dump_yaml)


def _yaml(cfg: Any) -> str:
    """The config as YAML for the ledger (C dumper: a sweep writes one per point)."""
    from rayjobs.config import configcache

    return dump_yaml(configcache.raw(cfg))


def dump_yaml(data: Any) -> str:
    """Plain data as YAML, keys in order (the ledger's form; ``rayjobs rerun`` reads it back)."""
    import yaml

    class Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
        def ignore_aliases(self, data: Any) -> bool:  # plain copies may share nodes: no &id001 anchors
            return True

    return yaml.dump(data, Dumper=Dumper, sort_keys=False)
