"""``rayjobs ui`` (fast tier: the real door app served by uvicorn on this process's loopback, as in
tests/test_door_client.py; no Ray): after ``rayjobs login`` it prints a one-time link to the page
that logs a browser in once (the second use is the login page, 401) and opens it with the
browser the environment names (``$BROWSER``); bad usage is one line, exit 2. The same link in a
real browser on a real head: tests/test_page_browser.py."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).parent))
from test_door_client import Served, cli, one_line_refusal, served  # noqa: E402,F401  (the fixture)

from rayjobs.door.sessions import COOKIE  # noqa: E402


def login(served: Served, url: str, who: str = "alice") -> None:
    fp = ("--fingerprint", served.cert.fingerprint) if url.startswith("https") else ()
    code, _, err = cli("login", url, *fp, stdin=served.door.tokens[who] + "\n")
    assert code == 0, err


def test_ui_prints_a_link_that_logs_in_once(served: Served) -> None:
    login(served, served.https)
    code, out, err = cli("ui", "--no-open")
    assert code == 0, err
    [url] = out.splitlines()  # the link alone on stdout
    assert url.startswith(served.https + "/login/once?code=") and "good once within 60 s" in err
    assert served.cert.fingerprint in err and url not in err and served.door.tokens["alice"] not in out + err
    s = requests.Session()  # the door's own certificate, unverified here (the CLI pins it; a browser asks)
    r = s.get(url, allow_redirects=False, verify=False, timeout=10)
    assert r.status_code == 303 and r.headers["location"] == "/" and COOKIE in r.headers["set-cookie"]
    assert "alice (member)" in s.get(served.https + "/", verify=False, timeout=10).text
    again = requests.get(url, allow_redirects=False, verify=False, timeout=10)
    assert again.status_code == 401 and "used already" in again.text and COOKIE not in again.headers.get("set-cookie", "")


def test_ui_opens_the_link_with_the_environments_browser(served: Served, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    login(served, served.http, "vic")
    seen = tmp_path / "opened"
    script = tmp_path / "browser.sh"
    script.write_text(f'#!/bin/sh\nprintf %s "$1" > {seen}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("BROWSER", str(script))
    import webbrowser

    monkeypatch.setattr(webbrowser, "_tryorder", None)  # read $BROWSER again (webbrowser caches it once)
    code, out, err = cli("ui")
    assert code == 0, err
    url = out.strip()
    assert seen.read_text() == url and url.startswith(served.http + "/login/once?code=")
    r = requests.get(url, allow_redirects=False, timeout=10)
    assert r.status_code == 303
    assert "vic (viewer)" in requests.get(served.http + "/", cookies=r.cookies, timeout=10).text


def test_ui_bad_usage_is_one_line_exit_2(served: Served) -> None:
    assert "ui: got unexpected extra argument" in one_line_refusal(*cli("ui", "extra"))
    assert "no such option --nope" in one_line_refusal(*cli("ui", "--nope"))
    code, out, err = cli("ui", "--no-open", "--address", "http://127.0.0.1:1")  # nothing answers there
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, (code, out, err)
    assert os.environ.get("RAYJOBS_DEBUG") != "1"
