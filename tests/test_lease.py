"""Two clusters, one storage root (issue 45 item 10): each cluster's queue keeps a store of its own,
named by the cluster, not its address; a second live queue on one store is refused in one line (the
lease); the embedded head's name outlives its restarts. Fast tier: names and the lease, no Ray. The
real heads: tests/test_two_clusters.py, tests/test_embedded.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rayjobs.oncluster import lease
from rayjobs.oncluster.lease import Lease, LeaseHeld, refusal, verdict

ME = {"owner": "me", "machine": "boot:1"}
NOW = 1_000_000.0


def doc(owner: str = "other", machine: str = "boot:2", beat: float = NOW - 5, **kw):
    return {"owner": owner, "machine": machine, "heartbeat": beat, "session": "session_x", "host": "h", "pid": 42, **kw}


@pytest.mark.parametrize("lease_doc,alive,want", [
    (None, True, "free"),
    ({}, True, "free"),
    (doc(owner="me"), True, "mine"),
    (doc(), True, "held"),  # another machine's, its heartbeat fresh
    (doc(beat=NOW - lease.STALE_S - 1), True, "stale"),  # no heartbeat for 2 minutes: taken over
    (doc(beat=NOW - 30, stale_after_s=20), True, "stale"),  # the holder's own word on its timing
    (doc(machine="boot:1"), False, "ended"),  # its holder ran here and is gone: at once
    (doc(machine="boot:1"), True, "held"),  # here and still running
    (doc(machine="boot:2"), False, "held"),  # a pid of another machine says nothing here
])
def test_what_a_lease_means_to_a_queue(lease_doc, alive, want):
    assert verdict(lease_doc, ME, NOW, alive=lambda d: alive) == want


def test_a_second_queue_on_a_store_is_refused_in_one_line_and_the_first_keeps_it(tmp_path):
    first = Lease(tmp_path, "session_a")
    assert first.acquire() == "free"
    second = Lease(tmp_path, "session_b")
    second.me["machine"] = "another-machine"  # (here, a live holder would be waited for first)
    with pytest.raises(LeaseHeld) as e:
        second.acquire(linger_s=0)
    line = str(e.value)
    assert "\n" not in line and "is held by the queue of Ray session session_a" in line and "RAYJOBS_QUEUE_NAME" in line
    assert "held by the queue of Ray session session_a" in refusal(tmp_path, "session_b", linger_s=0)  # the starter's
    assert refusal(tmp_path, "session_a") is None  # a starter of the holder's own session: its queue runs
    assert first.renew() and json.loads((tmp_path / lease.FILE).read_text())["owner"] == first.me["owner"]


def test_a_stale_lease_is_taken_over_and_its_old_holder_stops_at_its_next_heartbeat(tmp_path):
    old = Lease(tmp_path, "session_old")
    old.acquire()
    d = json.loads((tmp_path / lease.FILE).read_text())
    d.update(heartbeat=time.time() - lease.STALE_S - 1, machine="gone-machine")  # its heartbeat stopped
    (tmp_path / lease.FILE).write_text(json.dumps(d))
    new = Lease(tmp_path, "session_new")
    assert new.acquire(linger_s=0) == "stale"
    assert not old.renew()  # it finds another's lease: it must stop
    assert new.renew()


def test_a_holder_that_ran_on_this_machine_and_is_gone_is_taken_over_at_once(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    old = Lease(tmp_path, "session_old")
    old.me.update(pid=gone.pid, pid_start="1")  # a queue of a head restarted here (its actor's process ended)
    old.acquire()
    t = time.monotonic()
    assert Lease(tmp_path, "session_new").acquire(linger_s=60) == "ended"
    assert time.monotonic() - t < 30  # (not the linger: it is gone)


def test_a_holder_on_this_machine_still_running_is_waited_for_then_refused(tmp_path):
    live = Lease(tmp_path, "session_live")  # this process: it runs
    live.acquire()
    with pytest.raises(LeaseHeld):
        Lease(tmp_path, "session_other").acquire(linger_s=0.6)
    assert refusal(tmp_path, "session_other", linger_s=0.6).startswith(f"the queue store {tmp_path} is held by")


# --------------------------------------------------------------------------- names
def test_a_queue_is_named_by_its_cluster_not_its_address(tmp_path, monkeypatch):
    from rayjobs.oncluster import store
    from rayjobs.shared import skypilot_cluster_name

    monkeypatch.delenv("RAYJOBS_QUEUE_NAME", raising=False)
    monkeypatch.setenv("RAYJOBS_NODE_DIR", str(tmp_path / "node"))
    made = store.queue_name()
    assert made.startswith("c") and store.queue_name() == made  # made once on this machine, kept
    assert (tmp_path / "node" / "cluster_id").read_text().strip() == made
    assert store.store_root(str(tmp_path / "s")) == tmp_path / "s" / "queue" / made
    monkeypatch.setenv("RAYJOBS_QUEUE_NAME", "team-a")
    assert store.store_root(str(tmp_path / "s")) == tmp_path / "s" / "queue" / "team-a"
    monkeypatch.setenv("RAYJOBS_QUEUE_NAME", "../x")
    with pytest.raises(ValueError, match=r"^RAYJOBS_QUEUE_NAME='../x' cannot name the queue's store"):
        store.queue_name()
    info = {"SKYPILOT_CLUSTER_INFO": json.dumps({"cluster_name": "rayjobs-alice", "cloud": "GCP"})}
    assert skypilot_cluster_name(info) == "rayjobs-alice" and skypilot_cluster_name({}) is None


def test_the_node_script_names_the_store_after_the_skypilot_cluster(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bootstrap"))
    import ray_node

    cfg = ray_node.Config({"SKYPILOT_NODE_RANK": "0", "SKYPILOT_NODE_IPS": "10.0.0.1", "RAYJOBS_NODE_DIR": str(tmp_path)})
    sky = {"SKYPILOT_CLUSTER_INFO": json.dumps({"cluster_name": "rayjobs"})}
    assert ray_node.queue_name(cfg, sky) == "rayjobs"  # `rayjobs down` and `up` of one name: its backlog back
    assert ray_node.queue_name(cfg, dict(sky, RAYJOBS_QUEUE_NAME="mine")) == "mine"
    made = ray_node.queue_name(cfg, {})  # not under SkyPilot: an id made once in the node dir
    assert made == ray_node.queue_name(cfg, {}) == (tmp_path / "cluster_id").read_text().strip()


def test_the_embedded_heads_name_outlives_its_restarts_and_keeps_an_older_store(tmp_path, monkeypatch):
    from rayjobs.client import embedded

    monkeypatch.delenv("RAYJOBS_QUEUE_NAME", raising=False)
    monkeypatch.setenv("RAYJOBS_HOME", str(tmp_path / "home"))
    storage = tmp_path / "storage"
    name = embedded.queue_name(storage)
    assert name == embedded.queue_name(storage) == (tmp_path / "home" / "local" / "cluster_id").read_text().strip()
    other = tmp_path / "home2"
    monkeypatch.setenv("RAYJOBS_HOME", str(other))
    assert embedded.queue_name(storage) != name  # another home on the same storage root: a store of its own
    old = tmp_path / "old"
    (old / "queue" / "default" / "jobs").mkdir(parents=True)
    (old / "queue" / "default" / "jobs" / "j1.json").write_text("{}")
    monkeypatch.setenv("RAYJOBS_HOME", str(tmp_path / "home3"))
    assert embedded.queue_name(old) == "default"  # an older rayjobs' backlog: kept
    assert os.path.exists(tmp_path / "home3" / "local" / "cluster_id")


def test_a_laptop_that_started_a_refused_queue_says_why_at_once():
    """The laptop starts a missing queue with a small Ray job; refused, that job fails with the
    line: the command says it, not a generic timeout 90 s later."""
    from types import SimpleNamespace

    from rayjobs.client.queueapi import QueueDown, connect_queue

    line = "the queue store /b/queue/rayjobs is held by the queue of Ray session s1 on h (pid 7; its heartbeat 2 s ago)"

    class Head:
        target = SimpleNamespace(api=None, token=None)
        address = "http://127.0.0.1:1"
        started: list = []

        def get_json(self, path, params=None):
            return {"session_name": "s2"}

        def nodes(self):
            return [{"node_id": "h", "is_head_node": True}]

        def node_file(self, node_id, filename, lines=10):
            return None  # no queue ever wrote where its API listens

        def submit(self, spec):
            self.started.append(spec["submission_id"])
            return spec["submission_id"]

        def job(self, sid):
            return {"status": "FAILED"}

        def logs(self, sid):
            return f"some noise\n{line}\n"

    t = time.monotonic()
    with pytest.raises(QueueDown) as e:
        connect_queue(Head(), timeout=60)
    assert str(e.value) == f"the cluster's queue did not start: {line}" and len(Head.started) == 1
    assert time.monotonic() - t < 30  # (not the 60 s wait)
