"""The queue's record writes off its event loop (issue 46 item 4): the tick changes a record in
memory and hands the file to a thread of its own; Ray is asked to run an admitted job, and a stop
is answered, only once the record is on disk; a failed write is tried again with the newest version.
Fast tier: the real service, store and app over a fake Jobs API (tests/test_queueapi.py's harness).
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).parent))
from schedfakes import record  # noqa: E402
from test_queueapi import Api  # noqa: E402

from rayjobs.contract.record import JobRecord, State  # noqa: E402
from rayjobs.oncluster.recordwriter import RecordWriter  # noqa: E402
from rayjobs.oncluster.store import QueueStore  # noqa: E402


class GatedStore(QueueStore):
    """A store whose writes of the records ``hold`` picks wait for :attr:`gate` (or fail, ``fail``)."""

    def __init__(self, root: Path, hold: Callable[[JobRecord], bool], fail: bool = False) -> None:
        super().__init__(root)
        self.hold, self.fail, self.gate = hold, fail, threading.Event()
        self.held = threading.Event()  #: set once a held write began

    def write(self, rec: JobRecord) -> None:
        if self.hold(rec):
            self.held.set()
            if self.fail:
                raise OSError(28, "No space left on device")
            assert self.gate.wait(30), "the test never opened the gate"
        super().write(rec)


def api_with(tmp_path: Path, store: QueueStore) -> Api:
    api = Api(tmp_path)
    api.svc.store = api.svc.writer.store = store
    return api


def on_disk(api: Api, job_id: str) -> dict[str, Any]:
    return json.loads(api.svc.store.path(job_id).read_text())


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    return t, out


def test_the_tick_does_not_wait_for_the_admitted_record_and_ray_does(tmp_path):
    store = GatedStore(tmp_path / "queue", lambda rec: rec.state == State.ADMITTED)
    api = api_with(tmp_path, store)
    assert api.queue("a").status_code == 201
    t, _ = in_thread(api.svc.tick)
    t.join(20)
    assert not t.is_alive(), "the tick waited for the record's file"  # (the old tick wrote it itself)
    assert store.held.wait(20)
    assert api.svc.records["a"].state == State.ADMITTED  # the loop's at once
    assert on_disk(api, "a")["state"] == "waiting"
    for _ in range(5):
        api.svc.tick()
    assert ("submit", "a") not in api.jobs.calls  # Ray is not asked before the record says admitted
    store.gate.set()
    api.tick()
    assert on_disk(api, "a")["state"] == "admitted" and ("submit", "a") in api.jobs.calls
    assert api.get("a")["status"] == "RUNNING"


def test_an_admission_whose_record_cannot_be_written_never_reaches_ray(tmp_path, capfd):
    store = GatedStore(tmp_path / "queue", lambda rec: rec.state != State.WAITING, fail=True)
    api = api_with(tmp_path, store)
    assert api.queue("a").status_code == 201
    api.tick()
    assert ("submit", "a") not in api.jobs.calls
    view = api.get("a")
    assert view["status"] == "FAILED" and "could not write its record" in view["message"]
    assert on_disk(api, "a")["state"] == "waiting"  # the disk keeps the last version written
    err = capfd.readouterr().err
    assert err.count("could not write the record of a") == 1, err  # said once, tried again each tick
    store.fail = False
    store.gate.set()
    api.svc.tick()
    api.svc.writer.barrier().result(10)
    assert on_disk(api, "a")["status"] == "FAILED" and not api.svc.writer.failed


def test_a_stop_is_answered_once_its_record_is_on_disk(tmp_path):
    store = GatedStore(tmp_path / "queue", lambda rec: rec.status == "STOPPED")
    api = api_with(tmp_path, store)
    api.queue("a", groups=(9,))  # more GPUs than the cluster has: it waits
    api.tick()
    t, out = in_thread(lambda: api.http.post("/v1/jobs/a/stop"))
    assert store.held.wait(20)
    t.join(0.5)
    assert t.is_alive() and not out, "answered before the record was written"
    store.gate.set()
    t.join(20)
    assert out and out[0].status_code == 200 and out[0].json()["outcome"] == "cancelled", out
    assert on_disk(api, "a")["status"] == "STOPPED"


def test_a_stop_whose_record_cannot_be_written_is_a_507_line(tmp_path):
    store = GatedStore(tmp_path / "queue", lambda rec: rec.status == "STOPPED", fail=True)
    api = api_with(tmp_path, store)
    api.queue("a", groups=(9,))
    api.tick()
    r = api.http.post("/v1/jobs/stop", json={"ids": ["a"]})
    assert r.status_code == 507 and set(r.json()) == {"error"}, r.text
    assert "could not write the records of a" in r.json()["error"] and "\n" not in r.json()["error"]


def test_the_newest_version_is_the_one_left_on_disk(tmp_path):
    store = QueueStore(tmp_path / "queue")
    writer = RecordWriter(store)
    base = record("x", (1,))
    futs = [writer.put(base.with_(note=str(i)))[1] for i in range(50)]
    assert all(f.result(10) is not None for f in futs)
    assert store.get("x").note == "49" and not writer.pending


def test_ray_is_asked_to_stop_a_running_job_only_once_stop_asked_is_on_disk(tmp_path):
    """A head that crashed between Ray's stop and the record would recover the job without
    ``stop_asked`` (a job being preempted would go back in line instead of ending)."""
    store = GatedStore(tmp_path / "queue", lambda rec: rec.stop_asked and rec.state == State.ADMITTED)
    api = api_with(tmp_path, store)
    api.queue("a")
    api.tick()
    assert api.get("a")["status"] == "RUNNING"
    t, out = in_thread(lambda: api.http.post("/v1/jobs/a/stop"))
    assert store.held.wait(20)
    for _ in range(5):
        api.svc.tick()
    assert ("stop", "a") not in api.jobs.calls and not out
    store.gate.set()
    t.join(20)
    assert out and out[0].status_code == 200, out
    api.tick()
    assert ("stop", "a") in api.jobs.calls and on_disk(api, "a")["stop_asked"] is True
