"""The node script ends what a failed Ray start left of its new session, so running the script
again starts clean (fast tier: real processes, no Ray). Seen under load: the head's start timed
out, its GCS stayed up with the new session's name, and the run again failed with "Session name
... does not match persisted value" (test_faults' machines)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent


def _node_script():
    spec = importlib.util.spec_from_file_location("ray_node_failed_start", REPO / "bootstrap" / "ray_node.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _naming(path: Path) -> subprocess.Popen:
    """A process whose command line names ``path`` (as Ray's daemons name their session dir)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", f"--log-dir={path}/logs"])


def test_a_failed_start_leaves_no_process_of_its_session_and_spares_the_live_one(tmp_path: Path) -> None:
    node = _node_script()
    temp, home = tmp_path / "ray", tmp_path / "node"
    live, failed = temp / "session_live", temp / "session_failed"
    for d in (live, failed, home):
        d.mkdir(parents=True)
    (home / "node.json").write_text(json.dumps({"session_dir": str(live)}))
    cfg = SimpleNamespace(temp_dir=str(temp), dir=home)
    keep, left = _naming(live), _naming(failed)
    try:
        (temp / "session_latest").symlink_to(live)
        node.end_failed_start(cfg)  # the recorded session is the newest: nothing failed to start
        assert keep.poll() is None and left.poll() is None
        (temp / "session_latest").unlink()
        (temp / "session_latest").symlink_to(failed)
        node.end_failed_start(cfg)
        assert left.wait(timeout=30) is not None  # ended
        assert keep.poll() is None  # the live session's process is untouched
    finally:
        for p in (keep, left):
            p.kill()
            p.wait()
