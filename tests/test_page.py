"""The team's page, fast tier (no Ray): its templates rendered from recorded data, the login
sessions and CSRF rules, and its routes in process against the door of tests/test_door_api.py
(alice and bob members, vic a viewer). The same in a real browser on a real head:
tests/test_page_browser.py."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_door_api import Door  # noqa: E402

from rayjobs.door.sessions import COOKIE, OnceCodes, SessionBook, csrf_ok  # noqa: E402
from rayjobs.page import STATIC, VENDORED, views  # noqa: E402
from rayjobs.page.render import render  # noqa: E402

NOW = 1_800_000_000.0


def recorded(job_id: str, status: str, user: str, **kw: Any) -> dict[str, Any]:
    """A JobView as the door records it (the fields the page reads)."""
    meta = {"user": user, "gpu_groups": kw.pop("groups", "[2, 2]"), "priority": "0", **kw.pop("meta", {})}
    return {"submission_id": job_id, "status": status, "state": kw.pop("state", "waiting" if status == "QUEUED" else "admitted"),
            "metadata": meta, "message": kw.pop("message", None), "queue_position": kw.pop("position", None),
            "queued_at": NOW - 600, "admitted_at": NOW - 300, "attempts": [1], "checkpoint_step": 4, **kw}


# --------------------------------------------------------------------------- templates from recorded data
def test_the_queue_renders_running_and_waiting_with_why_each_waits() -> None:
    vs = [recorded("a-run", "RUNNING", "alice"), recorded("b-run", "RUNNING", "bob", groups="[1]"),
          recorded("c-wait", "QUEUED", "carol", position=1, message="waiting: needs 2 GPUs, 0 free", held="quota"),
          recorded("old", "SUCCEEDED", "alice", state="done")]
    q = views.queue_context(vs, now=NOW)
    assert [r["id"] for r in q["rows"]] == ["a-run", "b-run", "c-wait"]  # running first, the ended left out
    html = render("_queue.html", q=q, qs="", pager="")
    assert "waiting: needs 2 GPUs, 0 free" in html and "(quota)" in html and "2 \u00d7 2" in html and "1 \u00d7 1" in html
    assert (q["running"], q["waiting"]) == (2, 1) and q["users"] == ["alice", "bob", "carol"]
    assert "<script" not in render("_queue.html", q=views.queue_context([recorded("<script>", "RUNNING", "x")], now=NOW),
                                   qs="", pager="")  # autoescaped


def test_paging_is_server_side_with_10000_waiting() -> None:
    vs = [recorded(f"w{i:05d}", "QUEUED", f"u{i % 3}", position=i + 1, message="behind") for i in range(10_000)]
    q = views.queue_context(vs, page=3, now=NOW)
    assert (q["total"], q["pages"], len(q["rows"])) == (10_000, 200, 50)
    assert q["rows"][0]["position"] == 101
    mine = views.queue_context(vs, user="u1", page=999, now=NOW)
    assert mine["page"] == mine["pages"] == 67 and {r["user"] for r in mine["rows"]} == {"u1"}
    html = render("_queue.html", q=q, qs="page=3", pager="")
    assert html.count("<tr data-job=") == 50 and 'rel="next"' in html and 'rel="prev"' in html


def test_a_job_shows_its_facts_cause_curves_and_only_the_actions_allowed() -> None:
    run = recorded("a-run", "RUNNING", "alice")
    assert views.actions(run, True) == ["stop", "checkpoint"] and views.actions(run, False) == []
    failed = recorded("a-f", "FAILED", "alice", state="done", cause="CUDA out of memory")
    assert views.actions(failed, True) == ["resume"]
    steps = [{"step": s, "data": {"critic/score/mean": s / 10, "timing_s/step": 2.0, "other": 1}} for s in (1, 2, 3)]
    c = views.curves(steps)
    assert c["shown"] == ["critic/score/mean", "timing_s/step"] and c["x"] == [1, 2, 3]
    html = render("job.html", j=views.job_context(failed, True, NOW), c=c, done="", csrf="tok",
                  me={"name": "alice", "role": "member"})
    assert "CUDA out of memory" in html and 'action="/jobs/a-f/resume"' in html and "Stop now" not in html
    assert 'value="tok"' in html and '"critic/score/mean": [0.1, 0.2, 0.3]' in html
    bob = render("_job.html", j=views.job_context(run, False, NOW), done="", csrf="tok")
    assert "<form" not in bob and "RUNNING" in bob
    assert "rayjobs rerun a-f" in html and "rayjobs rerun" not in render(
        "_job.html", j=views.job_context(failed, False, NOW), done="", csrf="tok")  # another's: no rerun named
    assert not views.job_context(run, True, NOW)["rerun"]  # running: stop, not rerun


def test_a_sweep_marks_its_best_and_shows_the_halved_point_at_its_rung() -> None:
    over = lambda lr: f'["actor.lr={lr}"]'  # noqa: E731
    halving = '{"metric": "critic/score/mean", "rungs": [2], "mode": "max", "keep": 0.5}'
    pts = [recorded("s-0", "RUNNING", "alice", meta={"sweep": "s", "sweep_overrides": over("1e-6"), "halving": halving},
                    rungs={"2": 0.3}),
           recorded("s-1", "STOPPED", "alice", state="done", meta={"sweep": "s", "sweep_overrides": over("1e-5"),
                                                                   "halving": halving},
                    rungs={"2": 0.1}, halved={"rung": 2, "value": 0.1, "rank": 2, "of": 2, "text": "halved at step 2: 0.1, 2nd of 2"})]
    steps = {"s-0": [{"step": 1, "data": {"critic/score/mean": 0.2}}, {"step": 2, "data": {"critic/score/mean": 0.3}}],
             "s-1": [{"step": 1, "data": {"critic/score/mean": 0.05}}, {"step": 2, "data": {"critic/score/mean": 0.1}}]}
    s = views.sweep_context(pts, steps)
    assert s["swept"] == ["actor.lr"] and s["rank"] == "critic/score/mean" and s["rungs"] == [2]
    assert [r["best"] for r in s["rows"]] == [True, False] and s["rows"][0]["best_value"] == "0.3@2"
    assert s["chart"] == {"x": [1, 2], "series": {"s-0": [0.2, 0.3], "s-1": [0.05, 0.1]}}
    html = render("sweep.html", name="s", s=s)
    row = re.search(r'<tr data-job="s-1">.*?</tr>', html, re.S).group(0)
    assert "halved at rung 2" in row and "0.1" in row and "\u2605 best" in html and "halved at step 2" in html


def test_the_team_shows_usage_and_who_holds_each_gpu() -> None:
    usage = {"users": {"alice": {"productive": 7200, "redone": 0, "startup": 360, "idle": 0, "allocated": 7560,
                                 "waited": 1800, "jobs": 2, "ettr": 0.95}},
             "total": {"productive": 7200, "allocated": 7560, "jobs": 2, "ettr": 0.95}}
    rows = views.usage_rows(usage)
    assert rows[0]["user"] == "alice" and rows[0]["productive"] == "2" and rows[0]["ettr"] == "95%" and rows[-1]["user"] == "all"
    grid = views.gpu_grid([{"id": "n1", "ip": "10.0.0.1", "gpus": 4, "free_gpus": 1}],
                          {"a-run": {"n1": [2.0, 6.0]}}, {"a-run": "alice"})
    assert [c["user"] for c in grid[0]["cells"]] == ["alice", "alice", "other", ""] and grid[0]["free"] == 1
    html = render("team.html", usage=rows, since_days=7, now_users={"alice": {"gpus": 2, "quota": 4}}, grid=grid, nav="team",
                  me={"name": "vic", "role": "viewer"}, csrf="x")
    assert html.count('class="gpu held"') == 3 and html.count('class="gpu free"') == 1 and "95%" in html


def test_the_vendored_scripts_ship_with_their_licences_and_pinned_versions() -> None:
    for name, (pin, path) in VENDORED.items():
        f = STATIC / path
        assert f.is_file() and f.stat().st_size > 10_000, path
        assert (f.parent / "LICENSE").read_text().strip(), name
        assert pin.split("@")[1] in (f.read_text()[:400] + pin), pin
    import tomllib

    doc = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    data = doc["tool"]["setuptools"]["package-data"]["rayjobs.page"]
    assert {"templates/*.html", "static/*", "static/vendor/*/*"} <= set(data) and "jinja2>=3.1" in doc["project"]["dependencies"]
    assert "cdn" not in " ".join(p.read_text().lower() for p in (STATIC.parent / "templates").glob("*.html"))


# --------------------------------------------------------------------------- sessions and CSRF
def test_a_session_expires_is_closed_and_bounded_and_csrf_must_match() -> None:
    t = [1000.0]
    book = SessionBook(clock=lambda: t[0], ttl_s=60, max_sessions=3)
    sid, s = book.open("alice", "member", "tok1")
    assert book.get(sid) == s and book.get("nope") is None and book.get(None) is None
    assert csrf_ok(s, s.csrf) and not csrf_ok(s, "x") and not csrf_ok(s, "") and not csrf_ok(None, s.csrf)
    t[0] += 61
    assert book.get(sid) is None and len(book) == 0  # expired: gone
    ids = [book.open(f"u{i}", "member", None)[0] for i in range(5)]
    assert len(book) == 3 and book.get(ids[0]) is None and book.get(ids[-1]) is not None  # the oldest dropped
    assert book.close(ids[-1]) and not book.close(ids[-1]) and book.close_user("u3") == 1


def test_a_one_time_code_works_once_within_its_minute_and_is_kept_only_hashed() -> None:
    import hashlib

    t = [1000.0]
    codes = OnceCodes(clock=lambda: t[0], ttl_s=60, max_codes=3)
    code, entry = codes.issue("alice", "member", "tok1")
    assert len(code) >= 40 and entry.expires == 1060.0
    assert code not in repr(codes._by_hash) and hashlib.sha256(code.encode()).hexdigest() in codes._by_hash
    assert codes.redeem(code) == (entry, "")
    again, why = codes.redeem(code)
    assert again is None and "used already" in why and len(codes) == 0  # once
    late, _ = codes.issue("alice", "member", "tok1")
    t[0] += 60
    got, why = codes.redeem(late)
    assert got is None and "expired" in why and codes.redeem(late)[0] is None  # an expired one is gone too
    assert codes.redeem("") == (None, "the link has no code: run `rayjobs ui` again for a new one")
    assert codes.redeem("forged")[0] is None
    made = [codes.issue(f"u{i}", "member", None)[0] for i in range(5)]
    assert len(codes) == 3 and codes.redeem(made[0])[0] is None and codes.redeem(made[-1])[0].name == "u4"


# --------------------------------------------------------------------------- the routes in process
@pytest.fixture
def door(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Door:
    monkeypatch.setenv("RAYJOBS_OWNER", "olga")
    d = Door(tmp_path)
    d.send("alice", "a-run", groups=(2,))
    d.send("bob", "b-run")
    d.send("alice", "a-wait", groups=(2,))
    d.tick()
    return d


def browser(door: Door, who: str = "") -> Any:
    """A cookie-keeping client, logged in as ``who`` ("" : logged out)."""
    from fastapi.testclient import TestClient

    c = TestClient(door.app, follow_redirects=False)
    if who:
        r = c.post("/login", data={"token": door.tokens[who]})
        assert r.status_code == 303 and r.headers["location"] == "/", r.text
    return c


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def test_logged_out_every_page_is_the_login_and_a_wrong_token_sets_no_cookie(door: Door) -> None:
    c = browser(door)
    for path in ("/", "/jobs/a-run", "/sweeps/x", "/team"):
        r = c.get(path)
        assert r.status_code == 303 and r.headers["location"] == "/login", path
    assert c.get("/page/queue").headers["HX-Redirect"] == "/login" and c.get("/page/jobs/a-run/log").status_code == 401
    login = c.get("/login")
    assert login.status_code == 200 and 'type="password"' in login.text and "a-run" not in login.text
    bad = c.post("/login", data={"token": "rj_00000000_" + "x" * 43})
    assert bad.status_code == 401 and "refused the token" in bad.text and COOKIE not in bad.headers.get("set-cookie", "")
    [line] = [e["result"] for e in door.audit() if e["path"] == "/login" and e["status"] == 401]
    assert line.startswith("the door refused the token") and "<" not in line  # its one line, not the page's HTML
    assert c.get("/static/vendor/htmx/htmx.min.js").status_code == 200  # the login page's own files: no login


def test_a_login_sets_an_httponly_strict_cookie_that_the_api_never_takes(door: Door) -> None:
    c = browser(door)
    r = c.post("/login", data={"token": door.tokens["alice"]})
    cookie = r.headers["set-cookie"]
    assert COOKIE in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie and "Max-Age=43200" in cookie
    assert door.tokens["alice"] not in cookie
    page = c.get("/")
    assert page.status_code == 200 and "alice (member)" in page.text
    assert "a-run" in page.text and "b-run" in page.text and "needs 1 group of 2 GPU" in page.text
    assert c.get("/v1/jobs").status_code == 401  # the cookie is the page's only
    assert {e["action"] for e in door.audit() if e["user"] == "alice"} >= {"session.open"}
    text = (door.svc.store.root / "door" / "audit.jsonl").read_text()
    assert door.tokens["alice"] not in text and r.cookies.get(COOKIE, "") not in text
    c.post("/logout", data={"csrf": csrf_of(page.text)})
    assert c.get("/").headers["location"] == "/login"


def test_bob_sees_no_stop_on_alices_job_and_his_post_is_refused(door: Door) -> None:
    bob = browser(door, "bob")
    page = bob.get("/jobs/a-run")
    assert page.status_code == 200 and "Stop now" not in page.text and "RUNNING" in page.text
    mine = bob.get("/jobs/b-run").text
    assert "Stop now" in mine and "Stop at checkpoint" in mine
    r = bob.post("/jobs/a-run/stop", data={"csrf": csrf_of(mine), "mode": "checkpoint"})
    assert r.status_code == 403 and "only alice or an admin may stop it" in r.text
    door.tick()
    assert door.get("a-run")["status"] == "RUNNING" and not door.svc.records["a-run"].stop_asked
    assert ("stop", "a-run") not in door.jobs.calls
    assert ("bob", "stop", 403) in [(e["user"], e["action"], e["status"]) for e in door.audit()]
    vic = browser(door, "vic")
    assert "<form method=\"post\" action=\"/jobs" not in vic.get("/jobs/a-run").text


def test_a_post_without_its_sessions_csrf_token_changes_nothing(door: Door) -> None:
    alice = browser(door, "alice")
    r = alice.post("/jobs/a-run/stop", data={"csrf": "forged"})
    assert r.status_code == 403 and "CSRF" in r.text
    assert alice.post("/jobs/a-run/stop").status_code == 403
    assert door.get("a-run")["status"] == "RUNNING" and not door.svc.records["a-run"].stop_asked


def test_alice_stops_her_job_at_its_checkpoint_from_the_page(door: Door) -> None:
    alice = browser(door, "alice")
    ckpt = Path(door.get("a-run")["metadata"]["checkpoint_dir"])
    ckpt.mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("4")
    page = alice.get("/jobs/a-run").text
    r = alice.post("/jobs/a-run/stop", data={"csrf": csrf_of(page), "mode": "checkpoint"})
    assert r.status_code == 303 and r.headers["location"].startswith("/jobs/a-run?done="), r.text
    assert "at_checkpoint" in alice.get(r.headers["location"]).text
    assert ("alice", "stop", 303) in [(e["user"], e["action"], e["status"]) for e in door.audit()]


def test_a_revoked_users_session_ends_at_once(door: Door) -> None:
    bob = browser(door, "bob")
    assert bob.get("/").status_code == 200
    door.http.post("/v1/users/bob/revoke")
    assert bob.get("/").headers["location"] == "/login"


def test_the_pages_read_the_queue_and_the_job_log_follows_from_an_offset(door: Door) -> None:
    vic = browser(door, "vic")
    log = Path(door.svc.ray_logs) / "job-driver-a-run.log"
    log.write_text("one\ntwo\n")
    r = vic.get("/page/jobs/a-run/log", params={"offset": 0})
    assert r.text == "one\ntwo\n" and r.headers["X-Rayjobs-Next"] == "8" and r.headers["X-Rayjobs-Over"] == "0"
    with open(log, "a") as f:
        f.write("three\n")
    r = vic.get("/page/jobs/a-run/log", params={"offset": 8})
    assert r.text == "three\n" and r.headers["X-Rayjobs-Next"] == "14"
    import threading

    def later() -> None:
        time.sleep(0.3)
        with open(log, "a") as f:
            f.write("four\n")

    threading.Thread(target=later).start()
    r = vic.get("/page/jobs/a-run/log", params={"offset": 14, "wait": 20})  # a long poll: answered once it grew
    assert r.text == "four\n" and r.headers["X-Rayjobs-Next"] == "19"
    r = vic.get("/page/jobs/a-run/log", params={"offset": 19, "wait": 0.5})  # nothing new: empty, the same offset
    assert r.text == "" and r.headers["X-Rayjobs-Next"] == "19" and r.headers["X-Rayjobs-Over"] == "0"
    assert vic.get("/page/jobs/a-run/log", params={"wait": 26}).status_code == 422  # bounded
    run_dir = Path(door.svc.records["a-run"].meta.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.1.jsonl").write_text('{"step": 1, "data": {"critic/score/mean": 0.5}}\n')
    assert vic.get("/page/jobs/a-run/metrics").json()["series"] == {"critic/score/mean": [0.5]}
    part = vic.get("/page/queue", params={"user": "alice"}).text
    assert "a-run" in part and "b-run" not in part and 'hx-trigger="every 3s"' in part
    assert vic.get("/team").status_code == 200 and vic.get("/jobs/ghost").status_code == 404
    assert not [p for p in door.http.get("/v1/openapi.json").json()["paths"] if not p.startswith("/v1/")]


def test_the_default_queue_page_built_from_the_line_is_the_one_from_every_view(door: Door) -> None:
    """The refresh's fast path (views only for the page shown) gives what every job's view gives."""
    from rayjobs.door.routes.page import _line
    from rayjobs.oncluster import jobviews

    for i in range(7):
        door.send(("alice", "bob")[i % 2], f"w{i}", groups=(2,))
    door.send("bob", "b-done")
    door.jobs.end("b-run", "SUCCEEDED")
    door.tick()
    door.tick()
    every = jobviews.all_views(door.svc)
    for user, page, size in (("", 1, 50), ("", 2, 4), ("bob", 1, 3), ("alice", 3, 2), ("nobody", 1, 5)):
        want = views.queue_context(every, user=user, page=page, size=size, now=NOW)
        got = _line(door.svc, user, "", page, size)
        for q in (want, got):
            for r in q["rows"]:
                r.pop("since")
        assert got["rows"] == want["rows"] and got["total"] == want["total"], (user, page, size)
        assert (got["running"], got["waiting"], got["users"], got["pages"]) == \
            (want["running"], want["waiting"], want["users"], want["pages"])


def test_the_page_and_compare_rank_by_the_contracts_one_rule() -> None:
    """contract.ranking is compare's rule and the page's (was a copy on each side)."""
    from rayjobs.contract import ranking
    from rayjobs.contract.meta import JobMeta
    from rayjobs.views import compare, panel

    assert (compare.swept, compare.summary, compare.mark_best) == (ranking.swept, ranking.last_best, ranking.mark_best)
    assert (views.swept, views.last_best, views.mark_best) == (ranking.swept, ranking.last_best, ranking.mark_best)
    metas = [{"sweep_overrides": '["actor.lr=1e-6", "+x=1"]', "gpu_groups": "[2, 2]"},
             {"sweep_overrides": '["actor.lr=1e-5", "+x=1"]', "gpu_groups": "[1]"}, {"sweep_overrides": "oops"}]
    assert ranking.swept(metas) == (["actor.lr", "x"], [{"actor.lr": "1e-6", "x": "1"}, {"actor.lr": "1e-5", "x": "1"}, {}])
    assert ranking.swept(metas[:1]) == (["actor.lr", "x"], [{"actor.lr": "1e-6", "x": "1"}])
    curve = [[1, 0.5], [2, float("nan")], [3, 0.7], [4, 0.5], [5, 0.6]]
    assert ranking.last_best(curve, compare.metric_mode("critic/score/mean")) == \
        {"last": 0.6, "last_step": 5, "best": 0.7, "best_step": 3, "mode": "max"}
    assert ranking.last_best(curve, compare.metric_mode("actor/pg_loss")) == \
        {"last": 0.6, "last_step": 5, "best": 0.5, "best_step": 1, "mode": "min"}
    rows = [{"metrics": {"m": {"best": b, "mode": "max"} if b is not None else None}, "best": False} for b in (1, 3, 3, None)]
    ranking.mark_best(rows, "m")
    assert [r["best"] for r in rows] == [False, True, True, False]
    assert views.JobMeta is JobMeta  # the page parses metadata with the contract's one reader
    for v in (0.0, 1e-4, 0.5, 123.456, 2e5, -3.2):
        assert views.fmt_num(v) == panel.fmt_num(v)


def test_a_one_time_link_logs_a_browser_in_once_and_a_used_one_is_refused_and_audited(door: Door) -> None:
    from fastapi.testclient import TestClient

    link = door.as_["alice"].post("/v1/page/link")
    assert link.status_code == 201 and set(link.json()) == {"path", "expires_in"} and link.json()["expires_in"] <= 60
    path = link.json()["path"]
    code = path.split("code=")[1]
    assert path.startswith("/login/once?code=") and len(code) >= 40
    first = TestClient(door.app, follow_redirects=False)
    r = first.get(path)
    assert r.status_code == 303 and r.headers["location"] == "/" and "HttpOnly" in r.headers["set-cookie"]
    assert "alice (member)" in first.get("/").text
    second = TestClient(door.app, follow_redirects=False)
    r = second.get(path)
    assert r.status_code == 401 and "used already" in r.text and 'type="password"' in r.text
    assert COOKIE not in r.headers.get("set-cookie", "") and second.get("/").headers["location"] == "/login"
    assert door.bare.post("/v1/page/link").status_code == 401  # a token's: never the cookie
    assert first.post("/v1/page/link").status_code == 401
    entries = door.audit()
    assert ("alice", "session.link", 201) in [(e["user"], e["action"], e["status"]) for e in entries]
    assert ("alice", "session.open", 303) in [(e["user"], e["action"], e["status"]) for e in entries]
    refusal = [e for e in entries if e["path"] == "/login/once" and e["status"] == 401]
    assert len(refusal) == 1 and refusal[0]["action"] == "auth" and "used already" in refusal[0]["result"]
    text = (door.svc.store.root / "door" / "audit.jsonl").read_text()
    assert code not in text and door.tokens["alice"] not in text


def test_a_link_of_a_revoked_token_or_past_its_minute_logs_no_one_in(door: Door) -> None:
    from fastapi.testclient import TestClient

    bobs = door.as_["bob"].post("/v1/page/link").json()["path"]
    door.http.post("/v1/users/bob/revoke")
    r = TestClient(door.app, follow_redirects=False).get(bobs)
    assert r.status_code == 401 and "revoked" in r.text
    late = door.as_["alice"].post("/v1/page/link").json()["path"]
    door.app.state.once.clock = lambda: time.time() + 61  # used a minute after it was made
    r = TestClient(door.app, follow_redirects=False).get(late)
    assert r.status_code == 401 and "expired" in r.text
    door.app.state.once.clock = time.time
    owner = door.http.post("/v1/page/link").json()["path"]  # the cluster's token: its owner, an admin
    c = TestClient(door.app, follow_redirects=False)
    assert c.get(owner).status_code == 303 and "olga (admin)" in c.get("/").text


def test_a_long_poll_of_an_unchanged_log_makes_no_trip_to_the_io_pool(door: Door, monkeypatch: pytest.MonkeyPatch) -> None:
    """20 open pages long-poll their logs 4 times a second each: a stat on the loop says "nothing
    new" (was a read in the door's I/O pool each time, every hop a wake-up of the queue's loop)."""
    vic = browser(door, "vic")
    (Path(door.svc.ray_logs) / "job-driver-a-run.log").write_text("one\n")
    rj = door.app.state.rj
    trips: list[str] = []
    real = type(rj).in_io

    async def counted(self: Any, fn: Any, *args: Any) -> Any:
        trips.append(getattr(fn, "__name__", str(fn)))
        return await real(self, fn, *args)

    monkeypatch.setattr(type(rj), "in_io", counted)
    r = vic.get("/page/jobs/a-run/log", params={"offset": 4, "wait": 1})  # 4+ looks, nothing new
    assert r.text == "" and r.headers["X-Rayjobs-Next"] == "4"
    assert trips == ["locate"], trips
    r = vic.get("/page/jobs/a-run/log", params={"offset": 0})
    assert r.text == "one\n" and trips[-1] == "read_at"
