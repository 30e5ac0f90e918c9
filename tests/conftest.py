"""Test harness: a real Ray head (the embedded default) inside a network namespace of our own.

* The pytest process enters a fresh network namespace (only ``lo``) before any test runs.
* ``RAYJOBS_HOME`` and ``HOME`` point into a short temp dir, so the ledger, the embedded head's
  state, the user's settings file and Ray's ``~/.ray`` never touch the developer's own (and a stray ``~/.ray/auth_token``
  cannot switch auth on behind our back).
* The session head is rayjobs' own embedded head, started by :func:`rayjobs.client.embedded.start` and
  stopped by PID; every ``python -m rayjobs.submit`` without an address reuses it.
* Two tiers. A test that uses a Ray cluster (one of :data:`CLUSTER_FIXTURES`, or marked ``cluster``)
  is marked ``cluster``; ``python -m pytest -m "not cluster"`` is the fast tier, and there no Ray
  head may start at all (``RAYJOBS_NO_LOCAL_HEAD=1``: a test that would start one fails, saying so).
* Multi-node clusters with fake GPUs come from one factory (:class:`clusters.Clusters`): shared per
  shape and head settings across the session, or ``fresh`` for a test that breaks its cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import netns  # noqa: E402
import units  # noqa: E402
from clusters import Clusters, FakeGpuCluster  # noqa: E402,F401

#: The fixtures that start or use a real Ray cluster: a test asking for one is in the ``cluster`` tier.
CLUSTER_FIXTURES = {"cluster", "client", "clusters", "fresh_clusters", "one_node", "two_nodes"}

REPO = Path(__file__).resolve().parent.parent
NS = f"rjt{os.getpid()}"
_ENTERED = False
_ROOT = Path(tempfile.mkdtemp(prefix="rjt", dir="/tmp"))  # short: Ray's socket paths are limited


def pytest_configure(config: Any) -> None:
    global _ENTERED
    os.environ["RAYJOBS_HOME"] = str(_ROOT / "rj")
    os.environ["HOME"] = str(_ROOT / "home")
    if not hasattr(config, "workerinput"):  # the controlling process: its test processes inherit it
        os.environ[units.MAP_ENV] = str(_ROOT / "units.json")
    (_ROOT / "home").mkdir(exist_ok=True)
    from rayjobs.settingsources import KEYS, env_var

    # The developer's own settings variables (RAYJOBS_STORAGE, RAYJOBS_WANDB_PROJECT, ...) stay out.
    for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE", *map(env_var, KEYS)):
        os.environ.pop(var, None)
    if netns.can_use():
        netns.create(NS)
        netns.enter(NS)
        _ENTERED = True
    else:
        print("\nnote: not root (or no `ip`): tests run on plain loopback, not in a network namespace",
              file=sys.stderr)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    for item in items:
        if CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())) or item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.cluster)
    # Units of files to a test process (tests/units.py), the longest first: xdist deals them in
    # this order (--no-loadscope-reorder); a long one dealt last kept one process busy alone.
    unit = units.units_of(items)
    units.publish(unit)
    _UNIT.update(unit)
    measured = _file_seconds()
    guessed: dict[str, dict[str, float]] = {}
    for item in items:
        guessed.setdefault(item.location[0], {})[getattr(item, "originalname", item.name)] = guessed_seconds(item)
    weight: dict[str, float] = {}
    for f, g in guessed.items():
        weight[unit[f]] = weight.get(unit[f], 0.0) + measured.get(f, sum(g.values()))
    items.sort(key=lambda item: (-weight[unit[item.location[0]]], unit[item.location[0]]))  # stable


_UNIT: dict[str, str] = {}  #: test file -> its unit (tests/units.py)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: Any, nextitem: Any) -> None:
    """At the end of a unit of files, the long-lived head they shared is stopped: no file this test
    process runs later uses it (an idle head costs ~12 % of a core)."""
    unit = _UNIT.get(item.location[0], "")
    if nextitem is None or unit == _UNIT.get(nextitem.location[0]):
        return
    heads = units.heads_of(unit)
    if "embedded" in heads:
        from rayjobs.client import embedded

        embedded.stop()
    if heads & {"one_node", "two_nodes"}:
        for factory in _FACTORY:
            factory.common_done()


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # an xdist hook
def pytest_xdist_make_scheduler(config: Any, log: Any) -> Any:
    return units.make_scheduler(config, log)


def guessed_seconds(item: Any) -> float:
    """A rough duration of a test (a parametrized one counted once), from what it starts: a fresh
    cluster, extra nodes, a shared cluster; for a file not in :data:`FILE_SECONDS`."""
    names = set(getattr(item, "fixturenames", ()))
    if "fresh_clusters" in names:
        return 60.0
    if item.get_closest_marker("slow"):
        return 30.0
    return 15.0 if item.get_closest_marker("cluster") else 0.2


#: Each test file's seconds in a run of the suite (``RAYJOBS_WRITE_FILE_SECONDS=1`` rewrites it).
FILE_SECONDS = REPO / "tests" / "file_seconds.json"
_SPENT: dict[str, float] = {}


def _file_seconds() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(FILE_SECONDS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def pytest_runtest_logreport(report: Any) -> None:
    if os.environ.get("RAYJOBS_WRITE_FILE_SECONDS") == "1":
        f = report.nodeid.split("::", 1)[0]
        _SPENT[f] = _SPENT.get(f, 0.0) + float(report.duration)


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    # in the controlling process only (xdist's workers report their tests to it)
    if _SPENT and not hasattr(session.config, "workerinput"):
        FILE_SECONDS.write_text(json.dumps({f: round(s, 1) for f, s in sorted(_SPENT.items())}, indent=0) + "\n")


def pytest_collection_finish(session: Any) -> None:
    """The fast tier (no selected test is ``cluster``) starts no Ray: an embedded head a test would
    start (in this process or a command it runs) is refused."""
    if not any(item.get_closest_marker("cluster") for item in session.items):
        os.environ["RAYJOBS_NO_LOCAL_HEAD"] = "1"


def pytest_unconfigure(config: Any) -> None:
    from rayjobs.client import embedded

    embedded.stop()
    if _ENTERED:
        netns.destroy(NS, exclude={os.getpid()})
    shutil.rmtree(_ROOT, ignore_errors=True)


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def cluster() -> Any:
    """The embedded local head (real Ray, 127.0.0.1, token auth), shared by the session."""
    from rayjobs.client import embedded

    return embedded.ensure(quiet=True)


_FACTORY: list[Clusters] = []  #: the session's factory, once a test asked for it


@pytest.fixture(scope="session")
def clusters() -> Any:
    """The one factory of fake-GPU clusters (:class:`clusters.Clusters`), shared by the session."""
    factory = Clusters()
    _FACTORY.append(factory)
    yield factory
    factory.close()


@pytest.fixture(scope="module", autouse=True)
def _file_clusters(request: Any) -> Any:
    """At the end of each test file, the shared clusters only it asked for are stopped."""
    yield
    for factory in _FACTORY:
        factory.file_done(request.node.nodeid.split("::", 1)[0])


@pytest.fixture
def fresh_clusters(clusters: Any) -> Any:
    """The factory, for clusters of this test's own (``clusters.get(..., fresh=True)``), stopped after it."""
    yield clusters
    clusters.stop_fresh()


@pytest.fixture
def one_node(clusters: Any) -> FakeGpuCluster:
    """The session's 1-node fake cluster (2 GPUs, 6 CPUs), settled: nothing of an earlier test runs."""
    return clusters.get(((2, 6),), common=True)


@pytest.fixture
def two_nodes(clusters: Any) -> FakeGpuCluster:
    """The session's 2-node fake cluster (2 GPUs, 6 CPUs each), settled."""
    return clusters.get(((2, 6), (2, 6)), common=True)


@pytest.fixture(scope="session")
def client(cluster: Any) -> Any:
    from rayjobs.client.dashboard import Dashboard

    return Dashboard(cluster).sdk  # Ray's own SDK: what the tests check the cluster with


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project dir with the test workloads, as the current directory."""
    shutil.copytree(REPO / "tests" / "workloads", tmp_path / "workloads", ignore=shutil.ignore_patterns("conf"))
    shutil.copytree(REPO / "tests" / "workloads" / "conf", tmp_path / "conf")  # the user's own presets
    monkeypatch.chdir(tmp_path)
    return tmp_path


def rayjobs_submit(*args: str, cwd: Optional[Path] = None, env: Optional[dict[str, str]] = None,
                   timeout: float = 180) -> subprocess.CompletedProcess:
    """Run ``python -m rayjobs.submit ARGS`` as a user would (inside the test namespace)."""
    return subprocess.run([sys.executable, "-m", "rayjobs.submit", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, **(env or {})))


def rayjobs_cli(*args: str, cwd: Optional[Path] = None, env: Optional[dict[str, str]] = None,
                timeout: float = 180) -> subprocess.CompletedProcess:
    """Run the ``rayjobs`` command."""
    return subprocess.run([sys.executable, "-m", "rayjobs.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, **(env or {})))


def wait_until(pred: Any, timeout: float, what: str, every: float = 0.5) -> Any:
    """Poll ``pred`` until it returns something truthy (that value), bounded by ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def wait_terminal(client: Any, job_id: str, timeout: float = 120) -> str:
    """Poll a job's status until terminal (bounded). The queue submits a job to Ray only when it
    fits, so until then Ray does not know the id: that is "not yet", not an error."""
    deadline = time.monotonic() + timeout
    status = "?"
    while time.monotonic() < deadline:
        try:
            status = str(client.get_job_status(job_id))
        except RuntimeError as e:
            if "does not exist" not in str(e) and "404" not in str(e):
                raise
            status = "QUEUED (not in Ray yet)"
        if status in ("SUCCEEDED", "FAILED", "STOPPED"):
            return status
        time.sleep(0.3)
    raise AssertionError(f"{job_id} still {status} after {timeout} s")


def queue_status(target: Any, job_id: str) -> str:
    """A job's status as rayjobs sees it (QUEUED while the queue holds it; its history after)."""
    from rayjobs.api import Job
    from rayjobs.client.dashboard import Dashboard

    return Job(job_id, dashboard=Dashboard(target)).status()


def job_ids(target: Any = None) -> set[str]:
    """Every job id a cluster holds (default: the session's embedded head): the queue's -- a waiting job
    is in no Ray table yet -- and Ray's user jobs. What a "nothing was submitted" check compares."""
    from rayjobs.client import embedded
    from rayjobs.client.dashboard import Dashboard

    d = Dashboard(target if target is not None else embedded.ensure(quiet=True))
    return set(job_list(d.sdk)) | {v["submission_id"] for v in d.queue.jobs()}


def job_list(client: Any) -> list[str]:
    """The ids of the user jobs Ray lists (rayjobs' own small jobs, tagged rayjobs_role, left out)."""
    return [j.submission_id for j in client.list_jobs() if "rayjobs_role" not in (j.metadata or {})]


# --------------------------------------------------------------------------- on a fake cluster
def submit_on(c: FakeGpuCluster, *args: str, cwd: Optional[Path] = None, env: Optional[dict[str, str]] = None,
              timeout: float = 180) -> subprocess.CompletedProcess:
    """``python -m rayjobs.submit ARGS`` against cluster ``c``, as a user would."""
    return rayjobs_submit(*args, cwd=cwd, env=c.client_env(env), timeout=timeout)


def submit_ids(c: FakeGpuCluster, *args: str, cwd: Optional[Path] = None, env: Optional[dict[str, str]] = None) -> list[str]:
    """The ids a submit to ``c`` printed (it must succeed)."""
    r = submit_on(c, *args, cwd=cwd, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split()


def send_on(c: FakeGpuCluster, *overrides: str, experiment: str = "fake_ppo") -> str:
    """One job composed and sent in this process (what `python -m rayjobs.submit` does, minus its
    start-up): the verl stand-in unless ``experiment`` says otherwise; its id."""
    from rayjobs.submit import compose, pipeline

    cfg = compose.compose([f"+exp={experiment}", f"rayjobs.address={c.address}", *overrides])
    return pipeline.send(pipeline.prepare([cfg]), address=c.address)[0]


def cli_on(c: FakeGpuCluster, *args: str, env: Optional[dict[str, str]] = None, timeout: float = 180,
           cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    """The ``rayjobs`` command against cluster ``c``."""
    return rayjobs_cli(*args, cwd=cwd, env=c.client_env(env), timeout=timeout)


def cli_json(c: FakeGpuCluster, *args: str) -> Any:
    """``rayjobs ARGS --json`` against ``c``, parsed (it must succeed)."""
    import json

    r = cli_on(c, *args, "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def view(c: FakeGpuCluster, job_id: str) -> dict[str, Any]:
    """The queue's view of a job (its API's ``GET /v1/jobs/ID``)."""
    got = c.queue().job(job_id)
    assert got is not None, f"the queue has no record of {job_id}"
    return got


def wait_done(c: FakeGpuCluster, job_id: str, timeout: float = 180) -> str:
    """Poll the queue until the job has ended (bounded); its status."""
    got = wait_until(lambda: (v := c.queue().job(job_id)) is not None and v["state"] == "done" and v,
                     timeout, f"{job_id} to end", every=0.3)
    return str(got["status"])


def log_of(c: FakeGpuCluster, job_id: str) -> str:
    """A job's driver log as ``rayjobs logs`` prints it (also once Ray pruned it)."""
    from rayjobs.api import Job

    return Job(job_id, dashboard=c.dashboard()).logs()


def log_so_far(c: FakeGpuCluster, job_id: str) -> str:
    """The job's log so far ("" while it has none: still waiting, not in Ray yet)."""
    try:
        return log_of(c, job_id)
    except Exception:  # noqa: BLE001
        return ""


def waiting_line(c: FakeGpuCluster) -> dict[str, int]:
    """{id: place in line} of the jobs waiting in the queue (its API: GET /v1/jobs?status=QUEUED)."""
    return {v["submission_id"]: int(v["queue_position"]) for v in c.queue().jobs(status=["QUEUED"])}


def admitted_time(c: FakeGpuCluster, job_id: str) -> float:
    """When the queue admitted the job (its record)."""
    return float(view(c, job_id)["admitted_at"])


def standby_in_ray(c: FakeGpuCluster) -> list[str]:
    """The ids of the jobs the queue pre-started (tagged, not ended) that Ray lists."""
    from rayjobs.shared import STANDBY_KEY

    return [j.submission_id for j in c.client().list_jobs()
            if (j.metadata or {}).get(STANDBY_KEY) and str(j.status).split(".")[-1] in ("PENDING", "RUNNING")]
