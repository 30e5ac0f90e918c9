"""The door's pure parts (fast tier, no Ray, no server): users and tokens, the permission table
cell by cell, the audit file, the failed-authentication limits with a fake clock, the certificate
and its fingerprint."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from rayjobs.contract import pin
from rayjobs.door import audit, limits, permissions, tls, users
from rayjobs.door.permissions import ADMIN, MEMBER, VIEWER, Action


# --------------------------------------------------------------------------- users and tokens
def test_a_token_is_shown_once_kept_hashed_and_verified(tmp_path: Path) -> None:
    book = users.UserBook(tmp_path)
    u, token = book.add("alice", "member")
    assert users.TOKEN_RE.match(token) and u.role == "member"
    tokid, secret = token.split("_")[1], token.split("_", 2)[2]
    on_disk = (tmp_path / "users" / "alice.json").read_text()
    assert secret not in on_disk and token not in on_disk and tokid in on_disk
    assert stat.S_IMODE(os.stat(tmp_path / "users" / "alice.json").st_mode) == 0o600
    got, tid, why = book.verify(token)
    assert got is not None and got.name == "alice" and tid == tokid and why == ""
    # a token differing in one character of its secret, an unknown id, garbage: refused
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
    assert book.verify(wrong)[0] is None and book.verify(wrong)[2] == "unknown token"
    assert book.verify("rj_00000000_" + secret)[0] is None
    assert book.verify("hello")[2] == "not a rayjobs token"


def test_users_survive_a_reload_and_revoke_refuses_every_token_at_once(tmp_path: Path) -> None:
    book = users.UserBook(tmp_path)
    _, alice = book.add("alice")
    _, bob = book.add("bob", "viewer")
    again = users.UserBook(tmp_path)  # a restarted head
    assert [u.name for u in again.users()] == ["alice", "bob"] and again.verify(alice)[0].name == "alice"
    again.revoke("alice")
    assert again.verify(alice)[0] is None and "revoked" in again.verify(alice)[2]
    assert again.verify(bob)[0].name == "bob"
    assert users.UserBook(tmp_path).verify(alice)[0] is None  # durable
    # a revoked name may be added again: a new token, the old one still refused
    _, alice2 = again.add("alice", "admin")
    assert again.verify(alice2)[0].role == "admin" and again.verify(alice)[0] is None


def test_bad_names_roles_and_duplicates_are_one_line_refusals(tmp_path: Path) -> None:
    book = users.UserBook(tmp_path)
    book.add("alice")
    for name, role, status in [("Alice", "member", 422), ("1x", "member", 422), ("a" * 33, "member", 422),
                               ("bob", "root", 422), ("alice", "member", 409)]:
        with pytest.raises(users.UserError) as e:
            book.add(name, role)
        assert e.value.status == status and "\n" not in str(e.value)
    with pytest.raises(users.UserError) as e:
        book.revoke("carol")
    assert e.value.status == 404


def test_an_unreadable_user_file_is_named_and_left_out(tmp_path: Path) -> None:
    book = users.UserBook(tmp_path)
    book.add("alice")
    (tmp_path / "users" / "bob.json").write_text('{"name": "bob", "ro')
    again = users.UserBook(tmp_path)
    assert [u.name for u in again.users()] == ["alice"] and again.unreadable == ["bob.json"]


def test_last_use_is_written_at_most_once_a_minute(tmp_path: Path) -> None:
    now = [1000.0]
    book = users.UserBook(tmp_path, clock=lambda: now[0])
    _, token = book.add("alice")
    u, tid, _ = book.verify(token)
    assert book.used("alice", tid) is True
    book.save_use("alice", tid)
    now[0] += 10
    assert book.used("alice", tid) is False
    now[0] += users.LAST_USED_EVERY_S
    assert book.used("alice", tid) is True
    assert book.get("alice").last_used_at == now[0]


# --------------------------------------------------------------------------- who may do what
EXPECTED = {  # DOOR.md's table, cell by cell
    Action.READ: (True, True, True),
    Action.QUEUE: (True, True, False),
    Action.QUEUE_FOR_OTHERS: (True, False, False),
    Action.CONTROL_OWN: (True, True, False),
    Action.CONTROL_ANY: (True, False, False),
    Action.USERS: (True, False, False),
    Action.AUDIT_OWN: (True, True, True),
    Action.AUDIT_ALL: (True, False, False),
}


@pytest.mark.parametrize("action", list(Action))
@pytest.mark.parametrize("role", [ADMIN, MEMBER, VIEWER])
def test_every_cell_of_the_permission_table(role: str, action: Action) -> None:
    want = EXPECTED[action][[ADMIN, MEMBER, VIEWER].index(role)]
    assert permissions.may(role, action) is want
    assert permissions.TABLE[(role, action)] is want


def test_the_table_has_every_cell_and_an_unknown_role_may_nothing() -> None:
    assert set(permissions.TABLE) == {(r, a) for r in (ADMIN, MEMBER, VIEWER) for a in Action}
    assert not any(permissions.may("root", a) for a in Action)


def test_queue_refusals_name_both_users() -> None:
    assert permissions.refuse_queue("alice", MEMBER, "") is None
    assert permissions.refuse_queue("alice", MEMBER, "alice") is None
    line = permissions.refuse_queue("alice", MEMBER, "bob")
    assert "alice" in line and "bob" in line and "\n" not in line
    assert permissions.refuse_queue("root", ADMIN, "bob") is None
    assert "not queue" in permissions.refuse_queue("vic", VIEWER, "")


def test_control_refusals_name_the_owner() -> None:
    assert permissions.refuse_control("alice", MEMBER, "stop", "j-1", "alice") is None
    assert permissions.refuse_control("root", ADMIN, "stop", "j-1", "alice") is None
    line = permissions.refuse_control("bob", MEMBER, "stop", "j-123", "alice")
    assert line == "j-123 is alice's job: only alice or an admin may stop it"
    assert "only an admin" in permissions.refuse_control("bob", MEMBER, "resume", "j-2", "")
    assert "may read but not rerun" in permissions.refuse_control("vic", VIEWER, "rerun", "j-1", "vic")


def test_audit_filters_by_role() -> None:
    assert permissions.audit_user("root", ADMIN, None) == (None, None)
    assert permissions.audit_user("root", ADMIN, "bob") == ("bob", None)
    assert permissions.audit_user("bob", MEMBER, None) == ("bob", None)
    assert permissions.audit_user("vic", VIEWER, "vic") == ("vic", None)
    assert permissions.audit_user("bob", MEMBER, "alice")[1] is not None
    assert permissions.refuse_users("bob", MEMBER) and permissions.refuse_users("root", ADMIN) is None


# --------------------------------------------------------------------------- the audit file
def _entry(user: str, at: float, status: int = 200) -> dict:
    return {"at": at, "user": user, "role": "member", "addr": "10.0.0.2", "method": "POST", "path": "/v1/jobs",
            "action": "queue", "target": ["j-1"], "status": status, "result": "queued 1"}


def test_the_audit_appends_filters_and_a_torn_line_costs_only_itself(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = audit.AuditLog(path)
    log.append(_entry("alice", 10.0))
    log.append(_entry("bob", 20.0, 403))
    with open(path, "ab") as f:  # a head killed mid-write: half a line, no newline
        f.write(b'{"at": 25.0, "user": "mallory", "ro')
    again = audit.AuditLog(path)  # restarted
    again.append(_entry("alice", 30.0))
    got, total = again.read()
    assert [e["user"] for e in got] == ["alice", "bob", "alice"] and total == 3
    assert [e["at"] for e in again.read(user="alice")[0]] == [10.0, 30.0]
    assert [e["user"] for e in again.read(since=15.0)[0]] == ["bob", "alice"]
    last, total = again.read(limit=1)
    assert [e["at"] for e in last] == [30.0] and total == 3
    lines = path.read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[-1])["at"] == 30.0  # the torn one alone on its line
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_the_audit_keeps_only_its_fields(tmp_path: Path) -> None:
    log = audit.AuditLog(tmp_path / "a.jsonl")
    log.append(dict(_entry("alice", 1.0), token="rj_secret"))
    assert "rj_secret" not in (tmp_path / "a.jsonl").read_text()


# --------------------------------------------------------------------------- abuse limits
def test_a_burst_of_failures_blocks_the_address_for_a_growing_while() -> None:
    now = [0.0]
    lim = limits.FailureLimiter(clock=lambda: now[0])
    for i in range(limits.BURST - 1):
        assert lim.failed("1.2.3.4") is None
        now[0] += 1
    assert lim.blocked("1.2.3.4") is None
    assert lim.failed("1.2.3.4") == limits.FIRST_BLOCK_S  # the 10th within 60 s
    assert lim.blocked("1.2.3.4") == pytest.approx(30.0) and lim.blocked("5.6.7.8") is None
    now[0] += 31
    assert lim.blocked("1.2.3.4") is None
    lengths = []
    for _ in range(8):  # each further burst: twice as long, at most 15 min
        got = None
        for _ in range(limits.BURST):
            got = lim.failed("1.2.3.4") or got
        lengths.append(got)
        now[0] += got + 1
    assert lengths == [60.0, 120.0, 240.0, 480.0, 900.0, 900.0, 900.0, 900.0]


def test_failures_spread_over_more_than_the_window_never_block() -> None:
    now = [0.0]
    lim = limits.FailureLimiter(clock=lambda: now[0])
    for _ in range(100):
        assert lim.failed("1.2.3.4") is None
        now[0] += limits.WINDOW_S / (limits.BURST - 1) + 0.1


def test_a_quiet_hour_forgets_the_blocks_and_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    lim = limits.FailureLimiter(clock=lambda: now[0])
    for _ in range(limits.BURST):
        lim.failed("a")
    now[0] += limits.FORGET_S + 100
    assert [lim.failed("a") for _ in range(limits.BURST)][-1] == limits.FIRST_BLOCK_S
    monkeypatch.setattr(limits, "MAX_ADDRESSES", 5)
    for i in range(50):
        lim.failed(f"10.0.0.{i}")
    assert len(lim._seen) == 5


# --------------------------------------------------------------------------- the certificate
def test_the_certificate_is_made_once_and_kept(tmp_path: Path) -> None:
    first = tls.ensure(tmp_path, "10.200.7.10")
    again = tls.ensure(tmp_path, "10.200.7.10")
    assert first.fingerprint == again.fingerprint and first.fingerprint.startswith("sha256:")
    assert stat.S_IMODE(os.stat(first.key).st_mode) == 0o600
    der = tls.der_of(first.cert.read_bytes())
    assert pin.fingerprint(der) == first.fingerprint and pin.matches(der, first.fingerprint)
    assert not pin.matches(der, "sha256:" + "0" * 64)
    (tmp_path / "tls" / "cert.pem").unlink()  # a start cut off after the key: a new pair
    assert tls.ensure(tmp_path, "10.200.7.10").fingerprint != first.fingerprint


def test_fingerprints_are_normalised_and_bad_ones_refused() -> None:
    hexes = "AB" * 32
    assert pin.normalise(":".join(["AB"] * 32)) == "sha256:" + "ab" * 32
    assert pin.normalise("SHA256:" + hexes) == "sha256:" + "ab" * 32 == pin.normalise(hexes.lower())
    assert pin.hex_digits("sha256:" + hexes) == "ab" * 32
    for bad in ("", "sha1:abcd", "sha256:" + "zz" * 32, "ab" * 31):
        with pytest.raises(ValueError) as e:
            pin.normalise(bad)
        assert "\n" not in str(e.value)


# --------------------------------------------------------------------------- the door on the network: the setting
def test_the_door_setting_reaches_the_heads_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`cluster.door: network` / `rayjobs up door=network` -> RAYJOBS_DOOR in the task -> the node
    script sets RAYJOBS_DOOR_ADDRESS=<head ip>:8443 on the head only (the host reads it)."""
    import importlib.util

    from rayjobs.door.host import door_address
    from rayjobs.errors import ConfigError
    from rayjobs.provision import skypilot
    from rayjobs.settingsources import check_value

    assert check_value("cluster.door", "network", "x") == "network"
    with pytest.raises(ConfigError):
        check_value("cluster.door", "public", "x")
    assert skypilot.task_config({"door": "network"})["envs"]["RAYJOBS_DOOR"] == "network"
    with pytest.raises(ConfigError):
        skypilot.task_config({"door": "wide-open"})
    spec = importlib.util.spec_from_file_location("ray_node_door", Path(__file__).parent.parent / "bootstrap" / "ray_node.py")
    node = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(node)
    monkeypatch.setattr(node, "node_cache", lambda: None)
    monkeypatch.setattr(node, "_forwarded", lambda: [], raising=False)
    base = {"SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2", "SKYPILOT_NUM_NODES": "2", "RAYJOBS_DOOR": "network",
            "RAYJOBS_NODE_DIR": str(tmp_path / "node"), "RAY_AUTH_TOKEN": "t"}
    saved = dict(os.environ)  # prepare_env sets the Ray processes' environment: this process's
    try:
        for rank, door, want in (("0", "network", "10.0.0.1:8443"), ("1", "network", None), ("0", "loopback", None)):
            os.environ.update(RAYJOBS_DOOR_ADDRESS="stale", RAY_AUTH_TOKEN="t")
            node.prepare_env(node.Config(dict(base, SKYPILOT_NODE_RANK=rank, RAYJOBS_DOOR=door)))
            assert os.environ.get("RAYJOBS_DOOR_ADDRESS") == want
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert door_address("10.0.0.1:8443") == ("10.0.0.1", 8443) and door_address("10.0.0.1") == ("10.0.0.1", 8443)
    assert door_address("[fd00::1]:9000") == ("fd00::1", 9000)
    with pytest.raises(ValueError):
        door_address("10.0.0.1:http")
