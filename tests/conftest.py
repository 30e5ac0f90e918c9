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
* What a test does to a cluster as a user would (its commands, the queue's view, bounded waits) is
  :mod:`clusterops`, re-exported here; the benchmarks under ``scripts/`` import it too.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import netns  # noqa: E402
import units  # noqa: E402
from clusters import Clusters, FakeGpuCluster  # noqa: E402,F401
from clusterops import (  # noqa: E402,F401  (the tests import these from here)
    make_workdir, rayjobs_submit, rayjobs_cli, wait_until, wait_terminal, queue_status, job_ids, job_list,
    submit_on, submit_ids, send_on, cli_on, cli_json, view, wait_done, log_of, log_so_far, waiting_line,
    admitted_time, standby_in_ray,
)

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
    # What the tests' processes leave in the temp dir (SkyPilot's API server's request dirs, Ray's
    # dashboards' pymp-* of the test clusters, the runner's reap locks) and the node cache of their
    # jobs go under this session's root, removed at its end; pytest's tmp_path dirs stay where pytest
    # keeps them (its last 3 runs).
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    (_ROOT / "tmp").mkdir(exist_ok=True)
    os.environ.update(TMPDIR=str(_ROOT / "tmp"), RAYJOBS_NODE_CACHE=str(_ROOT / "cache"))
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
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


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: Any) -> None:
    """``-q`` shows no status line: xdist (3.8) writes "bringing up nodes..." twice into a quiet run's
    output that is not a terminal (as its workers start, and again once they have collected: its
    quiet status line never changes) and has no option against it."""
    status = session.config.pluginmanager.get_plugin("terminaldistreporter")
    if status is not None and session.config.option.verbose < 0:
        status.ensure_show_status = lambda: None


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

    try:
        embedded.stop()
        if _ENTERED:
            netns.destroy(NS, exclude={os.getpid()})
    finally:  # a head slow to stop must not leave the session's files behind
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
    make_workdir(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path
