"""Two clusters, one storage root (issue 45 item 10), on real heads: two fake-GPU clusters given the
same storage root (one team bucket for two `rayjobs up`) keep a queue store each and run their own
jobs only; a third head given the first's store name is refused in one line while the first runs.

Seen before: the queue kept its store at ``<storage>/queue/default``, so two heads on one root shared
it: each listed and admitted the other's jobs (3 of 5 of one did not succeed).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import send_on, wait_done


@pytest.mark.cluster
def test_two_heads_on_one_storage_root_keep_their_queues_apart(fresh_clusters, workdir, tmp_path):
    bucket = tmp_path / "bucket"
    shared = {"RAYJOBS_STORAGE": str(bucket)}
    a = fresh_clusters.get([(1, 4)], env=shared, fresh=True)
    b = fresh_clusters.get([(1, 4)], env=shared, fresh=True)
    ha, hb = a.queue().health(), b.queue().health()
    assert Path(ha.store).parent == Path(hb.store).parent == bucket / "queue" and ha.store != hb.store, (ha, hb)
    assert (Path(ha.store), Path(hb.store)) == (a.queue_store, b.queue_store)
    one = ("+fake.hold_gpus=true", "+fake.steps=2", "+fake.step_s=0.2")
    ja = [send_on(a, *one) for _ in range(3)]
    jb = [send_on(b, *one) for _ in range(3)]
    assert [wait_done(a, j) for j in ja] == ["SUCCEEDED"] * 3
    assert [wait_done(b, j) for j in jb] == ["SUCCEEDED"] * 3
    assert {v["submission_id"] for v in a.queue().jobs()} == set(ja)  # each sees, and ran, its own only
    assert {v["submission_id"] for v in b.queue().jobs()} == set(jb)
    assert sorted(p.stem for p in (Path(ha.store) / "jobs").glob("*.json")) == sorted(ja)

    # A third head given a's store name while a runs: its queue is refused, in one line; a's goes on.
    c = fresh_clusters.get([(1, 4)], env=dict(shared, RAYJOBS_QUEUE_NAME=Path(ha.store).name), fresh=True,
                           start=False)
    c.start(queue=False)
    r = subprocess.run([sys.executable, "-m", "rayjobs.door.host", "start"], env=dict(c.env, RAY_ADDRESS=c.gcs),
                       capture_output=True, text=True, timeout=180)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, (r.returncode, r.stderr[-3000:])
    assert lines[0].startswith(f"the queue store {ha.store} is held by the queue of Ray session {ha.session} on "), lines
    assert a.queue().health().session == ha.session
    assert wait_done(a, send_on(a, *one)) == "SUCCEEDED"
