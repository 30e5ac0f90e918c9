"""The team's page in a real browser (Debian's headless Chromium, driven by Playwright; no browser
download) against a real head with fake GPUs (the session's 1-node cluster; the browser reaches
its door on the loopback of this test process's namespace, as tests/test_door_cluster.py's
clients do): alice logs in and sees the queue with three users' jobs, one waiting with its
reason; her running job's curve gains points and its log follows; bob finds no stop on her job
and his forged POST is refused (403) with her job untouched; she stops it at a checkpoint from the
page; her halving sweep's page shows its halved point at its rung; a logged-out browser sees
nothing but the login; `rayjobs ui`'s one-time link logs a fresh browser in as alice, and its second
use is the login, refused. Screenshots are taken every run (a page that fails to render fails here);
with ``RAYJOBS_WRITE_SCREENSHOTS=1`` they replace docs/img/'s (else a run leaves the tree as it was).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
import requests

from clusterops import send_on, submit_ids, wait_until

pytestmark = pytest.mark.cluster
CHROMIUM = "/usr/bin/chromium"
IMG = Path(__file__).parent.parent / "docs" / "img"
#: Where this run's screenshots go: docs/img/ only when asked (the test's temp dir else).
SHOTS: dict[str, Path] = {}
ONE = ("trainer.nnodes=1", "trainer.n_gpus_per_node=1", "+fake.hold_gpus=true")
#: 3 points, one at a time (one GPU free): the middle one ranks below the first at rung 2 and is halved
SWEEP = ("-m", "+exp=fake_ppo", *ONE, "rayjobs.user=alice", "+fake.steps=4", "+fake.step_s=0.3", "trainer.save_freq=2",
         "+fake.score_offset=0.5,0.0,0.4", "rayjobs.halving.metric=critic/score/mean", "rayjobs.halving.rungs=[2]",
         "rayjobs.halving.keep=0.5", "rayjobs.halving.shuffle=false")


@pytest.fixture(scope="module")
def chromium() -> Any:
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no {CHROMIUM}: install Debian's chromium (`apt-get install -y chromium`; CI does, "
                    f".ci/apt-packages.txt)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def user(api: str, name: str) -> str:
    """A member's token (the owner adds it on loopback; a name left by an earlier run: again)."""
    r = requests.post(api + "/users", json={"name": name}, timeout=30)
    if r.status_code == 409:
        requests.post(f"{api}/users/{name}/revoke", timeout=30)
        r = requests.post(api + "/users", json={"name": name}, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["token"]


def status(api: str, job_id: str) -> str:
    return requests.get(f"{api}/jobs/{job_id}", timeout=30).json()["status"]


def logged_in(chromium: Any, base: str, token: str) -> Any:
    page = chromium.new_context(viewport={"width": 1280, "height": 820}).new_page()
    page.goto(base + "/")
    assert page.url == base + "/login"
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(base + "/")
    return page


def shot(page: Any, name: str) -> None:
    import os
    import tempfile

    where = IMG if os.environ.get("RAYJOBS_WRITE_SCREENSHOTS") == "1" else SHOTS.setdefault(
        "dir", Path(tempfile.mkdtemp(prefix="rayjobs-shots-")))
    where.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(where / f"page-{name}.png"))
    assert (where / f"page-{name}.png").stat().st_size > 1000, name


def test_the_page_in_a_browser_on_a_real_head(one_node: Any, workdir: Path, chromium: Any) -> None:
    base = f"http://127.0.0.1:{one_node.api_port}"
    api = base + "/v1"
    alice, bob = user(api, "alice"), user(api, "bob")
    a = send_on(one_node, *ONE, "rayjobs.user=alice", "trainer.save_freq=3", "+fake.steps=400", "+fake.step_s=0.4")
    b = send_on(one_node, *ONE, "rayjobs.user=bob", "+fake.steps=400", "+fake.step_s=1")
    w = send_on(one_node, *ONE, "rayjobs.user=carol", "+fake.steps=2")
    points: list[list[str]] = []  # the sweep's submit (a process: Hydra's multirun) while the rest goes on
    sweeping = threading.Thread(target=lambda: points.append(submit_ids(one_node, *SWEEP, cwd=workdir)))
    sweeping.start()
    try:
        wait_until(lambda: status(api, a) == "RUNNING" and status(api, b) == "RUNNING", 90, "alice's and bob's jobs to run")
        page = logged_in(chromium, base, alice)
        row = page.locator(f'tr[data-job="{w}"]')
        assert row.get_attribute("data-status") == "QUEUED" and "GPU" in row.locator("td.why").inner_text()
        users = {page.locator(f'tr[data-job="{j}"] td').nth(2).inner_text() for j in (a, b, w)}
        assert users == {"alice", "bob", "carol"}
        shot(page, "queue")
        page.click(f'tr[data-job="{a}"] a')
        page.wait_for_url(f"{base}/jobs/{a}")
        first = int(wait_until(lambda: int(page.inner_text("#points") or 0) or 0, 30, "the first points"))
        wait_until(lambda: int(page.inner_text("#points")) > first, 30, "the curve to gain points")
        wait_until(lambda: "step:" in page.inner_text("#log"), 30, "the log to follow")
        shot(page, "job")

        bobs = logged_in(chromium, base, bob)
        bobs.goto(f"{base}/jobs/{a}")
        assert bobs.locator("#actions button").count() == 0 and bobs.inner_text("#status") == "RUNNING"
        bobs.evaluate("""([id]) => { const f = document.createElement('form'); f.method = 'post';
            f.action = '/jobs/' + id + '/stop'; const c = document.createElement('input'); c.name = 'csrf';
            c.value = document.querySelector('input[name=csrf]').value; f.appendChild(c);
            document.body.appendChild(f); f.submit(); }""", [a])
        bobs.wait_for_selector("#error")
        assert "only alice or an admin may stop it" in bobs.inner_text("#error")
        assert status(api, a) == "RUNNING"

        page.click("button[value=checkpoint]")
        page.wait_for_selector("#done")
        assert "at_checkpoint" in page.inner_text("#done")
        wait_until(lambda: status(api, a) == "STOPPED", 60, "alice's job to stop at its checkpoint")
        wait_until(lambda: page.inner_text("#status") == "STOPPED", 20, "the page to show it stopped")
        assert f"rayjobs rerun {a}" in page.inner_text("#rerun")  # ended, hers: the rerun command named
        page.goto(base + "/team")
        shot(page, "team")

        sweeping.join(120)
        p = points[0]
        halved = wait_until(lambda: (v := requests.get(f"{api}/jobs/{p[1]}", timeout=30).json())["halved"] and v,
                            180, "the sweep's middle point to be halved")  # three points, one at a time
        page.goto(f"{base}/sweeps/{halved['metadata']['sweep']}")
        assert "halved at rung 2" in page.inner_text(f'#compare tr[data-job="{p[1]}"]')
        assert "\u2605" in page.inner_text(f'#compare tr[data-job="{p[0]}"]')
        shot(page, "sweep")

        anon = chromium.new_context().new_page()
        anon.goto(f"{base}/jobs/{a}")
        assert anon.url == base + "/login" and a not in anon.content() and anon.locator("#token").count() == 1

        # `rayjobs ui`'s one-time link (POST /v1/page/link with alice's token): a fresh browser opens it
        # and lands on the queue logged in as alice; the same link again is the login, refused
        link = requests.post(api + "/page/link", headers={"Authorization": f"Bearer {alice}"}, timeout=30).json()
        once = chromium.new_context().new_page()
        once.goto(base + link["path"])
        assert once.url == base + "/" and once.inner_text("#me") == "alice (member)"
        again = chromium.new_context().new_page()
        again.goto(base + link["path"])
        assert again.url.startswith(base + "/login/once") and "used already" in again.inner_text("#error")
        assert again.locator("#token").count() == 1
    finally:
        sweeping.join(120)
        for j in (a, b, w, *(points[0] if points else [])):
            requests.post(f"{api}/jobs/{j}/stop", timeout=30)
