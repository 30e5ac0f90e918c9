"""The library functions the command line calls instead of reaching into client/, provision/, the
ledger and preflight/ itself (issue 46 item 3): what each answers without a cluster (fast tier).
The commands over them run on real heads in test_embedded, test_head_down, test_history, test_polish."""

from __future__ import annotations

from pathlib import Path

import pytest

from rayjobs import api
from rayjobs.errors import ConfigError


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RAYJOBS_HOME", str(tmp_path / "rj"))
    monkeypatch.delenv("RAYJOBS_CLUSTER_NAME", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./rayjobs.yaml of the checkout's
    return tmp_path / "rj"


def test_no_embedded_head_is_said_not_started(home: Path) -> None:
    st = api.local_status()
    assert st.record is None and st.up_s is None and st.health is None
    assert "preflight helper" in st.helper and not st.helper.startswith("rayjobs: ")
    assert api.local_running_jobs() == [] and api.stop_local() is False
    assert not (home / "local" / "head.json").exists()


def test_the_local_record_counts_only_ended_kept_jobs(home: Path) -> None:
    from rayjobs import ledger

    ledger.keep_final("j-done", {"id": "j-done", "status": "SUCCEEDED"}, log_tail=b"a\nlast line\n",
                      metrics=None, metrics_from=None)
    ledger.keep_final("j-run", {"id": "j-run", "status": "SUCCEEDED"}, log_tail=None, metrics=None, metrics_from=None)
    rows = [{"id": "j-done", "status": "SUCCEEDED"}, {"id": "j-run", "status": "RUNNING"},
            {"id": "j-gone", "status": "FAILED"}]
    assert api.kept_ended(rows) == 1  # j-run is running again (resumed); j-gone kept nothing
    assert api.kept_log_tail("j-done") == b"a\nlast line\n" and api.kept_log_tail("j-gone") is None
    assert api.record_dir("ID") == home / "runs" / "ID"


def test_a_cluster_name_and_a_login_url_are_checked_as_the_commands_did(home: Path) -> None:
    from rayjobs.api import people

    assert api.cluster_name("mine") == "mine" and api.cluster_name() == "rayjobs"
    assert api.disconnect_cluster() is False
    with pytest.raises(ConfigError, match="plain http:// to x.example.com is refused"):
        people.check_login_url("http://x.example.com")
    with pytest.raises(ConfigError, match="needs its certificate's fingerprint"):
        people.check_login_url("https://x.example.com", fingerprint=None)
    people.check_login_url("http://127.0.0.1:8263")
    assert people.login_path() == home / "login.json"
