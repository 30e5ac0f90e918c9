#!/usr/bin/env python3
"""Autostop sentinel: live while the rayjobs Ray cluster has PENDING/RUNNING jobs, exit when idle.

Runs on the head as a SkyPilot job (``bootstrap/sentinel.yaml``), so SkyPilot's autostop, which
counts only SkyPilot jobs, does not stop a cluster that is busy with Ray jobs. It polls the Jobs
API on the head's loopback (with the cluster's token) every ``RAYJOBS_SENTINEL_POLL_S`` seconds and
exits 0 after ``RAYJOBS_IDLE_MINUTES`` without a non-terminal job. Jobs waiting in rayjobs' queue
are no Ray jobs yet (records on the storage root): the queue's API on the head's loopback
(``/v1/health``: how many wait and are admitted) counts them. If neither API answers, that counts
as idle too: a broken cluster should not be kept up forever. One sentinel per node (a lock file);
a second exits at once. Knobs: RAYJOBS_NODE_DIR (~/.rayjobs/node: token, lock),
RAYJOBS_DASHBOARD_PORT (8265), RAYJOBS_API_PORT (8263).
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

NON_TERMINAL = ("PENDING", "RUNNING")


def log(msg: str) -> None:
    print(f"[rayjobs-sentinel {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def busy_jobs(url: str, token: str) -> "list[str] | None":
    """Ids of PENDING/RUNNING Ray jobs, or None if the Jobs API did not answer."""
    req = urllib.request.Request(url + "/api/jobs/", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            jobs = json.loads(r.read() or b"[]")
    except (urllib.error.URLError, OSError, ValueError) as e:
        log(f"Jobs API at {url} did not answer ({e.__class__.__name__}); counting as idle")
        return None
    return [j.get("submission_id") or j.get("job_id") or "?" for j in jobs if j.get("status") in NON_TERMINAL]


def queued_jobs(url: str, token: str) -> int:
    """Jobs the rayjobs queue holds (waiting or admitted); 0 if its API did not answer."""
    req = urllib.request.Request(url + "/v1/health", headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            doc = json.loads(r.read() or b"{}")
        return int(doc.get("waiting") or 0) + int(doc.get("admitted") or 0)
    except (urllib.error.URLError, OSError, ValueError, TypeError):
        return 0


def main() -> int:
    node_dir = Path(os.environ.get("RAYJOBS_NODE_DIR") or Path.home() / ".rayjobs" / "node").expanduser()
    idle_s = float(os.environ.get("RAYJOBS_IDLE_MINUTES", "30")) * 60
    poll_s = float(os.environ.get("RAYJOBS_SENTINEL_POLL_S", "30"))
    url = f"http://127.0.0.1:{int(os.environ.get('RAYJOBS_DASHBOARD_PORT', 8265))}"
    api = f"http://127.0.0.1:{int(os.environ.get('RAYJOBS_API_PORT') or 8263)}"
    node_dir.mkdir(parents=True, exist_ok=True)
    lock = open(node_dir / "sentinel.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        log("another sentinel is already running on this node: nothing to do")
        return 0
    try:
        token = (node_dir / "auth_token").read_text().strip()
    except OSError:
        token = ""
    log(f"keeping the cluster up while Ray jobs run or queue; exiting after {idle_s / 60:g} idle minute(s)")
    idle_since = time.monotonic()
    while True:
        busy = (busy_jobs(url, token) or []) + ["(queued)"] * queued_jobs(api, token)
        now = time.monotonic()
        if busy:
            if now - idle_since > poll_s:
                log(f"busy: {len(busy)} job(s) running or queued")
            idle_since = now
        elif now - idle_since >= idle_s:
            log(f"no Ray job for {idle_s / 60:g} minute(s): exiting so autostop can stop the cluster")
            return 0
        time.sleep(min(poll_s, max(0.05, idle_s - (now - idle_since))) if not busy else poll_s)


if __name__ == "__main__":
    sys.exit(main())
