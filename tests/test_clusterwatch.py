"""The queue reads the cluster off the door's event loop (issue 47 item 7), and the door encodes the
job list once per change of the queue (fast tier: the real service, store and app over fakes).

* the tick never reads the cluster on its own thread: a reader thread does, and the tick admits
  from its newest reading -- never before a first one;
* a reading applies each job's part only to the running entry it was read for, newest first;
* ``GET /v1/jobs`` with the queue unchanged is encoded once for N requests, and a body kept is
  always the one a fresh encoding gives, whatever changed.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional

sys.path.insert(0, str(Path(__file__).parent))
from queuefakes import FakeCluster  # noqa: E402
from schedfakes import node  # noqa: E402
from test_queueapi import Api  # noqa: E402

from rayjobs.contract import capacity  # noqa: E402
from rayjobs.oncluster.clusterstate import Observed  # noqa: E402
from rayjobs.oncluster.clusterwatch import ClusterWatch, Reading  # noqa: E402


class ThreadCluster(FakeCluster):
    """The fake node; says on which thread each reading ran."""

    def __init__(self, gpus: int) -> None:
        super().__init__([node("n0", gpus)])
        self.threads: list[int] = []

    def observe(self, running: Mapping[str, Any]) -> Observed:
        self.threads.append(threading.get_ident())
        return super().observe(running)


class Handed:
    """A watch whose readings the test hands over (what the thread would have read, and for which entries)."""

    def __init__(self) -> None:
        self.reading: Optional[Reading] = None
        self.asks = 0

    def start(self, wake: Any) -> None:
        pass

    def ask(self, running: Mapping[str, Any], fast: bool = False) -> None:
        self.asks += 1

    def newest(self) -> Optional[Reading]:
        return self.reading


def free(gpus: float, total: float = 2) -> list[capacity.Node]:
    return [capacity.Node("n0", total, 16, gpus, 16 - 3 * (total - gpus))]


def ticks_until(api: Api, done: Any, n: int = 200) -> None:
    for _ in range(n):
        api.svc.tick()
        if done():
            return
        time.sleep(0.01)


def test_the_tick_reads_the_cluster_in_a_thread_of_its_own_and_admits_from_that_reading(tmp_path: Path) -> None:
    cluster = ThreadCluster(2)
    watch = ClusterWatch(cluster, every_s=0.01, linger_s=0.5)
    woken = threading.Event()
    watch.start(woken.set)
    api = Api(tmp_path, cluster=watch)
    assert api.queue("a", "b", "c").status_code == 201
    ticks_until(api, lambda: len(api.svc.state.running) == 2)
    assert set(api.svc.state.running) == {"a", "b"} and list(api.svc.state.waiting) == ["c"]
    assert cluster.threads and threading.get_ident() not in cluster.threads  # never on the tick's thread
    assert woken.is_set() and watch.reads == len(cluster.threads)


def test_no_job_is_admitted_before_a_first_reading_of_the_cluster(tmp_path: Path) -> None:
    """No reading yet is not 'a cluster without GPUs' (on which every job would start at once)."""
    watch = Handed()
    api = Api(tmp_path, cluster=watch)
    api.queue("a", "b", "c")
    for _ in range(5):
        api.svc.tick()
    assert not api.svc.state.running and len(api.svc.state.waiting) == 3 and watch.asks == 5
    watch.reading = Reading(1, 1, Observed(free(2)))
    api.svc.tick()
    assert set(api.svc.state.running) == {"a", "b"}


def test_a_reading_applies_only_to_the_running_entries_it_was_read_for_newest_first(tmp_path: Path) -> None:
    watch = Handed()
    api = Api(tmp_path, cluster=watch)
    watch.reading = Reading(1, 1, Observed(free(2)))
    api.queue("a", groups=(2,))
    api.svc.tick()
    api.queue("b", groups=(2,))  # waits: the tick keeps reading
    api.svc.tick()
    r1 = api.svc.state.running["a"]
    assert r1.unplaced == [2]
    watch.reading = Reading(2, 2, Observed(free(0), {"a": []}, held={"a": {"n0": [2.0, 6.0]}}), {"a": r1})
    api.svc.tick()
    assert r1.unplaced == [] and api.svc.held == {"a": {"n0": [2.0, 6.0]}}
    # its run again (a new entry): a reading of the last run neither marks it placed nor gone
    r2 = api.svc.state.running["a"] = dataclasses.replace(r1, unplaced=[2])
    watch.reading = Reading(3, 3, Observed(free(2), {"a": []}, {"a"}, {"a": {"n0": [2.0, 6.0]}}), {"a": r1})
    api.svc.tick()
    assert r2.unplaced == [2] and not r2.ending and api.svc.held == {} and "b" in api.svc.state.waiting
    # an older reading than the one applied is never applied after it
    watch.reading = Reading(2, 2, Observed(free(0), {"a": []}), {"a": r2})
    api.svc.tick()
    assert r2.unplaced == [2] and api.svc.nodes == free(2)


def test_the_reader_thread_reads_at_once_on_a_change_and_sleeps_once_not_asked(tmp_path: Path) -> None:
    cluster = ThreadCluster(2)
    watch = ClusterWatch(cluster, every_s=10.0, linger_s=0.2)  # the cadence alone would read once
    woken: list[int] = []
    watch.start(lambda: woken.append(1))
    api = Api(tmp_path, cluster=FakeCluster([node("n0", 2)]))
    api.queue("a")
    api.tick()
    running = api.svc.state.running
    watch.ask({})
    _wait(lambda: watch.reads >= 1)
    watch.ask(running)  # the running set moved: read now, not in 10 s
    _wait(lambda: watch.reads >= 2)
    got = watch.newest()
    assert got.asked == 2 and got.read_for("a", running["a"]) and len(woken) == 2  # woken by what was new only
    time.sleep(0.5)
    reads = watch.reads
    time.sleep(0.3)
    assert watch.reads == reads  # not asked for longer than linger_s: the thread waits for an ask


def _wait(cond: Any, n: int = 500) -> None:
    for _ in range(n):
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError("never happened")


# --------------------------------------------------------------------------- the list, encoded once
def test_the_job_list_is_encoded_once_per_change_of_the_queue_for_any_number_of_requests(tmp_path: Path) -> None:
    from rayjobs.door.listcache import ListCache

    api = Api(tmp_path)
    rj = api.app.state.rj
    api.queue("a", "b", "c")
    api.tick()
    before = rj.lists.encoded
    bodies = {api.http.get("/v1/jobs").content for _ in range(10)}
    assert len(bodies) == 1 and rj.lists.encoded == before + 1
    api.http.get("/v1/jobs?user=nobody")  # another query: its own body
    assert rj.lists.encoded == before + 2

    def same_as_fresh() -> bytes:
        kept = api.http.get("/v1/jobs").content
        rj.lists = ListCache()
        assert api.http.get("/v1/jobs").content == kept
        return kept

    seen = [same_as_fresh()]
    for change in (lambda: api.jobs.ray["a"].update(message="step 3"),  # Ray's word, read at the next poll
                   lambda: api.jobs.end("a", "FAILED"),
                   lambda: api.http.post("/v1/jobs/stop", json={"ids": ["c"], "mode": "now"}),
                   lambda: api.queue("d", groups=(4,))):  # never fits: a new decision's note
        change()
        api.tick()
        seen.append(same_as_fresh())
    assert len(set(seen)) == len(seen)  # each change showed
