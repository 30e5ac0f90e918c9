"""The tree's shape, checked on every run (fast tier, no Ray): imports between rayjobs' packages
go one way (no new package cycle), and Ray's privates are used only where docs/design.md says why
no public API serves (issue 46 items 3 and 5).

Every import counts, a function's own too (a lazy import is still a dependency). A package here is
``rayjobs.<name>``; a module directly under ``rayjobs/`` is its own package.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "rayjobs"

#: Package cycles the tree still has: none may be added (the last two, submit <-> views and
#: submit <-> preflight, were healed by the ledger and the config planes of their own).
KNOWN_CYCLES: set[frozenset[str]] = set()

#: Modules that may touch Ray's privates, each with why (docs/design.md, "Ray and heavy imports").
RAY_PRIVATE = {
    "door/host.py": "this Ray session's name and log dir (ray._private.worker._global_node)",
    "oncluster/headapi.py": "this session's dashboard URL (ray._private.worker._global_node)",
    "oncluster/clusterstate.py": "per-node placement groups and free resources (GCS client, ray._private.state)",
}


def _package(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> set[str]:
    """``rayjobs.<package>`` names ``path`` imports (module level or inside functions)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "rayjobs" and len(parts) > 1 and (ROOT / parts[1]).exists() or (
                    parts[0] == "rayjobs" and len(parts) > 1 and (ROOT / f"{parts[1]}.py").exists()):
                out.add(parts[1])
    return out


def package_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        mine = _package(path)
        edges.setdefault(mine, set()).update(p for p in _imports(path) if p != mine)
    return edges


def test_no_new_package_cycle() -> None:
    edges = package_edges()
    pairs = {frozenset({a, b}) for a, b in itertools.combinations(sorted(edges), 2)
             if b in edges[a] and a in edges.get(b, set())}
    assert pairs <= KNOWN_CYCLES, f"packages importing each other: {sorted(map(sorted, pairs - KNOWN_CYCLES))}"
    healed = KNOWN_CYCLES - pairs
    assert not healed, f"a known cycle is gone, take it off KNOWN_CYCLES: {sorted(map(sorted, healed))}"


#: The laptop's planes (``client`` too: its REST clients and the embedded head are the laptop's
#: way to a cluster; the head has its own, ``oncluster.raydash``) and the head's.
LAPTOP = {"cli", "api", "views", "client", "submit", "config", "ledger", "preflight", "provision", "settings",
          "settingsources", "settingslogin"}
HEAD = {"oncluster", "door", "page", "sim"}


@pytest.mark.parametrize("plane", sorted(HEAD | {"contract"}))
def test_the_head_and_the_contract_never_import_the_laptop(plane: str) -> None:
    edges = package_edges()
    assert not edges.get(plane, set()) & LAPTOP, (plane, sorted(edges[plane] & LAPTOP))


def test_preflight_imports_no_head_plane() -> None:
    """The laptop's checks apply the rules both sides share from ``contract`` (the fit rule:
    ``contract.capacity``), never the head's code."""
    edges = package_edges()
    assert not edges.get("preflight", set()) & HEAD, sorted(edges["preflight"] & HEAD)


#: The node script's (``bootstrap/``, outside the package), each named in docs/design.md ("Ray and
#: heavy imports") with why: start-up speed, each with the ``ray start`` CLI or no public way behind it.
BOOTSTRAP_PRIVATE = {
    "ray_node.py": "GcsClient + gcs_pb2 (nodes joined, before the dashboard, no driver); Node/RayParams "
                   "(ray start without its CLI import); two patches (head lookup, dashboard modules)",
}
#: What counts as a Ray private: ``ray._private``, the compiled ``ray._raylet`` and the generated protobufs.
PRIVATE_MARKS = ("ray._private", "ray._raylet", "ray.core.generated")


def private_users(root: Path) -> set[str]:
    """Modules under ``root`` that name a Ray private (import or mention)."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*.py")
            if any(m in p.read_text() for m in PRIVATE_MARKS)}


def test_ray_privates_only_where_design_md_says_why() -> None:
    design = (ROOT.parent / "docs" / "design.md").read_text()
    for root, allowed in ((ROOT, RAY_PRIVATE), (ROOT.parent / "bootstrap", BOOTSTRAP_PRIVATE)):
        users = private_users(root)
        assert users <= set(allowed), f"Ray privates in {sorted(users - set(allowed))}: use a public API or say why"
        assert not set(allowed) - users, f"no Ray private left in {sorted(set(allowed) - users)}: take it off"
    assert "Ray privates" in design and "`ray._raylet.GcsClient`" in design and "_patch_dashboard_modules" in design


def test_the_checks_see_a_cycle_when_there_is_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cycle check is not blind: two packages importing each other are found."""
    for pkg, other in (("a", "b"), ("b", "a")):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "m.py").write_text(f"def f():\n    from rayjobs.{other} import m\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    assert package_edges() == {"a": {"b"}, "b": {"a"}}


def test_every_package_ships() -> None:
    """Every package of the tree is in pyproject's list (an install that is not editable -- the
    cluster's image, a wheel -- has only those: ``rayjobs.sim`` was missing)."""
    import tomllib

    listed = set(tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT.parent).parts) for p in ROOT.rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)


#: Modules that may still spell a status as a string, each with why (issue 46 item 1: statuses are
#: ``contract.status.Status`` everywhere else).
STATUS_LITERALS: dict[str, str] = {}


def _allowed(rel: str, allow: dict[str, str]) -> bool:
    return any(rel == k or (k.endswith("/") and rel.startswith(k)) for k in allow)


def _only_where_allowed(found: list[str], allow: dict[str, str], what: str) -> None:
    """``found`` (``path:line: ...``) only in the modules ``allow`` names, and each of those still has one."""
    outside = [f for f in found if not _allowed(f.split(":")[0], allow)]
    assert not outside, f"{what}: {outside}"
    stale = [k for k in allow if not any(f.startswith(k) for f in found)]
    assert not stale, f"nothing of that left in {stale}: take it off the allow-list"


def status_literals(root: Path) -> list[str]:
    """``path:line: VALUE`` for each string constant outside contract/ that is a status's value."""
    from rayjobs.contract.status import STATUSES

    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("contract/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in STATUSES:
                out.append(f"{rel}:{node.lineno}: {node.value}")
    return out


def test_statuses_are_the_enum_outside_the_contract() -> None:
    _only_where_allowed(status_literals(ROOT), STATUS_LITERALS, "status literals (use contract.status.Status, "
                        "or say why in STATUS_LITERALS)")


def test_the_status_check_sees_a_literal(tmp_path: Path) -> None:
    (tmp_path / "contract").mkdir()
    (tmp_path / "contract" / "ok.py").write_text('X = "FAILED"\n')
    (tmp_path / "m.py").write_text('def f(s):\n    return s == "SUCCEEDED" or s == "succeeded"\n')
    assert status_literals(tmp_path) == ["m.py:2: SUCCEEDED"]


#: Modules that may still read a job's metadata by its key, each with why (issue 46 item 1: a job's
#: metadata is read through ``contract.meta.JobMeta``, so its keys and their forms live in one place).
META_KEY_READS = {
    "oncluster/queuerequests.py": "a request's raw `after`, parsed strictly (bad JSON is refused, not read as none)",
    "oncluster/jobviews.py": "the head's list filter reads 3 keys of up to 100,000 records' metadata, none parsed whole",
    "door/routes/page.py": "the queue page's filter reads 2 keys of up to 10,000 waiting jobs' metadata, none parsed whole",
    "page/views.py": "the queue page's filter choices: 2 keys of every waiting job's metadata, none parsed whole",
}


def _receiver(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        return _receiver(node.func)
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def meta_key_reads(root: Path) -> list[str]:
    """``path:line: receiver[key]`` for each ``x[KEY]``, ``x.get(KEY)`` or ``x.pop(KEY)`` outside contract/
    where KEY is a JobMeta field's literal name and x's name says it is metadata (``meta``, ``metadata``,
    ``meta(job)``, ``spec.metadata`` ..., or the short ``m``)."""
    from dataclasses import fields

    from rayjobs.contract.meta import JobMeta

    keys = {f.name for f in fields(JobMeta)} - {"extra"}
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("contract/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                key, recv = node.slice.value, node.value
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args
                  and node.func.attr in ("get", "pop", "setdefault") and isinstance(node.args[0], ast.Constant)):
                key, recv = node.args[0].value, node.func.value
            else:
                continue
            if key in keys and ("meta" in _receiver(recv).lower() or _receiver(recv) == "m"):
                out.append(f"{rel}:{node.lineno}: {_receiver(recv)}[{key}]")
    return out


def test_metadata_is_read_through_jobmeta_outside_the_contract() -> None:
    _only_where_allowed(meta_key_reads(ROOT), META_KEY_READS, "metadata read by key (use "
                        "contract.meta.JobMeta.from_ray, or say why in META_KEY_READS)")


def test_the_metadata_check_sees_a_key_read(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text('def f(job, row, meta):\n    return meta(job).get("run_dir"), meta["sweep"], '
                                   'row["sweep"], meta.get("job_submission_id"), job.metadata["user"], m.get("run")\n')
    assert meta_key_reads(tmp_path) == ["m.py:2: meta[run_dir]", "m.py:2: meta[sweep]", "m.py:2: metadata[user]", "m.py:2: m[run]"]


#: What the command line may import (issue 46 item 3): it renders what the library returns and calls
#: the library for every action, never the laptop's lower planes (client, provision, ledger, preflight).
#: ``views`` only to render; ``settings`` only to read them.
CLI_MAY_IMPORT = {"cli", "api", "contract", "errors", "views", "settings"}

#: Modules of other planes the command line may render with, each with why.
CLI_RENDERERS = {"sim.table": "a replay's reports as plain columns: pure, beside the simulator whose reports it "
                              "reads (scripts/bench_team.py and api.replay's plot use it too)"}


def _rayjobs_modules(path: Path) -> set[str]:
    """The ``rayjobs.X.Y`` modules (``X.Y``) ``path`` imports by name, ``from rayjobs.X import Y`` too."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rayjobs."):
            out.update(f"{node.module[8:]}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name[8:] for a in node.names if a.name.startswith("rayjobs."))
    return out


def cli_reaches_past_the_library(cli: Path) -> list[str]:
    """``path: package`` for each import of a module under ``cli`` past the library's planes."""
    out = []
    for path in sorted(cli.rglob("*.py")):
        for pkg in sorted(_imports(path) - CLI_MAY_IMPORT):
            mods = {m for m in _rayjobs_modules(path) if m.split(".")[0] == pkg}
            if not mods or not mods <= set(CLI_RENDERERS):
                out.append(f"{path.name}: {pkg}")
    return out


def test_the_cli_imports_only_the_library() -> None:
    found = cli_reaches_past_the_library(ROOT / "cli")
    assert not found, f"the CLI reaches past rayjobs.api (route it through an api function): {found}"


def test_the_cli_check_sees_a_lower_plane(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("from rayjobs import api, ledger\nfrom rayjobs.sim import table\n"
                                   "def f():\n    from rayjobs.client.door import check_url\n    import rayjobs.shared\n"
                                   "    from rayjobs.sim import engine\n")
    assert cli_reaches_past_the_library(tmp_path) == ["m.py: client", "m.py: ledger", "m.py: shared", "m.py: sim"]
