"""The one place that talks to Ray's Jobs SDK (``ray.job_submission``) and translates its errors.

Ray raises bare ``RuntimeError``/``ConnectionError`` with multi-line text; every function here
turns them into one-line :class:`~rayjobs.errors.RayjobsError` messages that name the address
and say what to run next.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Optional

import logging

from rayjobs.errors import ClusterUnreachable, ConfigError, JobNotFound, SubmitError
from rayjobs.settings import Target
from rayjobs.shared import RUNNER_OF

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
_QUIET = logging.getLogger("rayjobs.quiet")
_QUIET.setLevel(logging.CRITICAL)


def client(target: Target) -> Any:
    """A ``JobSubmissionClient`` for ``target`` (the token goes in a header, never in a file)."""
    from ray.job_submission import JobSubmissionClient

    headers = {"Authorization": f"Bearer {target.token}"} if target.token else None
    try:
        return JobSubmissionClient(target.address, headers=headers)
    except Exception as e:  # ConnectionError, RuntimeError, ValueError -- all "can't reach it"
        raise ClusterUnreachable(unreachable_message(target, e)) from e


def unreachable_message(target: Target, e: BaseException) -> str:
    hint = (
        "start the tunnel with `rayjobs connect`"
        if target.source.startswith("cluster")
        else "check the address, or unset RAY_ADDRESS/RAY_API_SERVER_ADDRESS to use the embedded local cluster"
    )
    if "401" in str(e) or "403" in str(e) or "nauthor" in str(e):
        return f"the Ray cluster at {target.address} refused the request (auth token missing or wrong): set RAY_AUTH_TOKEN or run `rayjobs connect`"
    return f"cannot reach a Ray dashboard at {target.address} (from {target.source}): {hint}"


def submit(c: Any, kwargs: dict[str, Any]) -> str:
    """Submit one job (``kwargs`` from :meth:`JobSpec.submit_kwargs`); returns its id."""
    try:
        return c.submit_job(**kwargs)
    except Exception as e:
        msg = " ".join(str(e).split())
        if "already exists" in msg:
            raise SubmitError(f"a job with id {kwargs.get('submission_id')} already exists on the cluster; resubmit to get a new id") from e
        if "exceeds the maximum" in msg or "too large" in msg.lower() or "EntityTooLarge" in msg:
            raise ConfigError("the working_dir upload was refused as too large: exclude big files (rayjobs.excludes or .gitignore)") from e
        raise SubmitError(f"the cluster refused the job: {msg[:300]}") from e


def info(c: Any, job_id: str) -> Any:
    """``JobDetails`` for a full id."""
    try:
        return c.get_job_info(job_id)
    except Exception as e:
        if "does not exist" in str(e) or "404" in str(e) or "not found" in str(e).lower():
            raise JobNotFound(f"no job {job_id!r} on the cluster; `rayjobs list` shows the ids") from e
        raise SubmitError(f"could not read job {job_id}: {' '.join(str(e).split())[:300]}") from e


def list_jobs(c: Any) -> list[Any]:
    """All jobs on the cluster (Ray has no filter; callers filter), less rayjobs' runner drivers.

    Each rayjobs job's runner connects to Ray for the queue as a driver of its own, which Ray lists
    as a separate DRIVER job (tagged ``rayjobs_runner_of``; see :func:`rayjobs.oncluster.admission.connect`);
    counted, two jobs showed as "4 SUCCEEDED". Other drivers (a user's ``ray.init``) stay listed.
    """
    try:
        found = list(c.list_jobs())
    except Exception as e:
        raise ClusterUnreachable(f"could not list jobs: {' '.join(str(e).split())[:300]}") from e
    from rayjobs.views.jobrows import meta

    return [j for j in found if RUNNER_OF not in meta(j)]


def resolve_id(c: Any, prefix: str, jobs: Optional[Iterable[Any]] = None) -> str:
    """A full submission id from a unique prefix (exact ids win)."""
    jobs = list(jobs) if jobs is not None else list_jobs(c)
    ids = sorted({j.submission_id for j in jobs if j.submission_id})
    if prefix in ids:
        return prefix
    hits = [i for i in ids if i.startswith(prefix)]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        from rayjobs.errors import NoSuchJob, did_you_mean

        raise NoSuchJob(f"no job matches {prefix!r}{did_you_mean(prefix, ids)}; `rayjobs list` shows the ids")
    raise JobNotFound(f"{prefix!r} matches {len(hits)} jobs ({', '.join(hits[:4])}...); give more of the id")


def logs(c: Any, job_id: str) -> str:
    """The whole driver log."""
    try:
        return c.get_job_logs(job_id)
    except Exception as e:
        raise SubmitError(f"could not read the log of {job_id}: {' '.join(str(e).split())[:300]}") from e


def stop(c: Any, job_id: str) -> bool:
    """Ask Ray to stop a job; True if it was still running."""
    try:
        return bool(c.stop_job(job_id))
    except Exception as e:
        raise SubmitError(f"could not stop {job_id}: {' '.join(str(e).split())[:300]}") from e


def dashboard_version(c: Any) -> dict[str, Any]:
    """The cluster's ``/api/version`` answer (Ray version etc.)."""
    try:
        r = c._do_request("GET", "/api/version")
        return r.json() if r.status_code == 200 else {}
    except Exception:
        return {}


# --------------------------------------------------------------------------- working_dir
#: Ray 2.60 accepts packages up to its gRPC message size (512 MiB); bigger ones fail mid-upload.
def max_package_bytes() -> int:
    return int(os.environ.get("RAY_max_grpc_message_size", 512 * 1024 * 1024))


def working_dir_bytes(path: str, excludes: list[str]) -> int:
    """Bytes Ray would upload for ``path`` (its own traversal, .gitignore and excludes honoured)."""
    from ray._private.runtime_env.packaging import _dir_travel, _get_excludes

    root = Path(path).absolute()
    total = [0]

    def handler(p: Path) -> None:
        if p.is_file() and not p.is_symlink():
            total[0] += p.stat().st_size

    _dir_travel(root, [_get_excludes(root, excludes)], handler, include_gitignore=True, logger=_QUIET)
    return total[0]


def check_working_dir(path: str, excludes: list[str]) -> None:
    """Refuse, before any upload, a working_dir Ray would refuse (or that is missing)."""
    if not os.path.isdir(path):
        raise ConfigError(f"rayjobs.working_dir={path!r} is not a directory; give an existing directory")
    size = working_dir_bytes(path, excludes)
    limit = max_package_bytes()
    if size >= limit:
        raise ConfigError(
            f"working_dir {path} is {size / 2**20:.0f} MiB after excludes, over Ray's {limit / 2**20:.0f} MiB limit: "
            f"exclude large files (add them to .gitignore or rayjobs.excludes) or set rayjobs.working_dir to a smaller dir"
        )


def upload_working_dir(c: Any, runtime_env: dict[str, Any]) -> dict[str, Any]:
    """Upload ``runtime_env['working_dir']`` once (content-addressed) and return the env with its URI.

    A sweep's points share one package, so it is hashed and uploaded once, not once per point.
    """
    env = dict(runtime_env)
    try:
        c._upload_working_dir_if_needed(env)
    except Exception as e:
        msg = " ".join(str(e).split())
        if "size" in msg.lower() and ("limit" in msg.lower() or "exceed" in msg.lower()):
            raise ConfigError(f"the working_dir is too large for Ray: {msg[:200]}; exclude big files") from e
        raise SubmitError(f"could not upload the working_dir: {msg[:300]}") from e
    return env
