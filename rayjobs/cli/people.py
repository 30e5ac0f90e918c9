"""``rayjobs login``/``whoami``/``logout`` (a teammate's laptop), ``rayjobs users`` and ``rayjobs audit``
(the door's people). A token is read from a prompt, stdin or a file -- never an argument, which
would land in the shell's history -- and printed only by ``users add``, alone on stdout's first line."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Optional

import click

from rayjobs.cli.common import ADDRESS, _say, json_rows
from rayjobs.cli.group import main
from rayjobs.errors import ConfigError, run_cli

#: The most a token read from stdin or a file may be (a token is ~55 characters).
MAX_TOKEN_CHARS = 4096


def read_token(token_file: Optional[str]) -> str:
    """The token from ``token_file``, else a prompt (stdin a terminal), else stdin's first line.

    Raises:
        ConfigError: the file is unreadable, or no token came.
    """
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as f:
                text = f.read(MAX_TOKEN_CHARS)
        except OSError as e:
            raise ConfigError(f"--token-file {token_file}: cannot read it ({e.strerror}); give the file the token "
                              f"`rayjobs users add` printed") from None
    elif sys.stdin is not None and sys.stdin.isatty():
        import getpass

        text = getpass.getpass("token (from `rayjobs users add`; not shown): ")
    else:
        text = sys.stdin.readline(MAX_TOKEN_CHARS) if sys.stdin is not None else ""
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise ConfigError("no token given: pipe it on stdin, type it at the prompt, or use --token-file F")
    return token


@main.command("login")
@click.argument("url")
@click.option("--fingerprint", default=None, metavar="sha256:HEX",
              help="The door certificate's fingerprint (`rayjobs users add` prints it); needed for https.")
@click.option("--token-file", default=None, metavar="FILE", help="Read the token from FILE (else stdin or a prompt).")
def login_cmd(url: str, fingerprint: Optional[str], token_file: Optional[str]) -> None:
    """Log in to a team's door at URL with your token (asked for, or read from stdin or --token-file;
    never an argument); keeps URL, token and fingerprint in $RAYJOBS_HOME/login.json (0600)."""
    from rayjobs.api import people

    def go() -> Any:
        people.check_login_url(url, fingerprint=fingerprint)  # a bad URL is said before the token is asked for
        return people.login(url, read_token(token_file), fingerprint)

    kept = run_cli(go)
    _say(f"logged in to {kept.url} as {kept.user} ({kept.role}); kept in {_login_path()}")


def _login_path() -> str:
    from rayjobs.api import people

    return str(people.login_path())


@main.command("whoami")
@ADDRESS
@click.option("--json", "as_json", is_flag=True, help="Print the identity as JSON.")
def whoami_cmd(address: Optional[str], as_json: bool) -> None:
    """Who the cluster's door takes you for (name, role) and where it is."""
    from rayjobs.api import people

    me = run_cli(lambda: people.whoami(address))
    if as_json:
        click.echo(json.dumps(me, indent=2))
        return
    click.echo(f"{me['name']} ({me['role']}) at {me['url']} (from {me['source']}; by {me['via']})")


@main.command("logout")
def logout_cmd() -> None:
    """Forget the kept login (the token stays valid on the door until an admin revokes it)."""
    from rayjobs.api import people

    had = people.logout()
    _say(f"logged out: {_login_path()} removed" if had else "not logged in: nothing to forget")
    if people.env_login():
        _say("RAYJOBS_URL and RAYJOBS_TOKEN are still set in this shell: unset them too")


# --------------------------------------------------------------------------- users
@main.group("users")
def users() -> None:
    """The team's users of the cluster's door (admins)."""


@users.command("add")
@click.argument("name")
@click.option("--role", type=click.Choice(["admin", "member", "viewer"]), default="member", show_default=True)
@ADDRESS
def users_add(name: str, role: str, address: Optional[str]) -> None:
    """Add a user: its token ALONE on stdout's first line (shown this once); on stderr, the door's
    URL, its certificate's fingerprint and the `rayjobs login` line to hand over with it."""
    from rayjobs.api import people

    made = run_cli(lambda: people.add_user(name, role, address))
    click.echo(made.token)
    _say(f"added {made.name} ({made.role}); the token above is shown this once (the head keeps only its hash)")
    if made.url:
        fp = f" --fingerprint {made.fingerprint}" if made.fingerprint else ""
        _say(f"the door for teammates: {made.url}{f'  fingerprint {made.fingerprint}' if made.fingerprint else ''}")
        _say(f"{made.name} runs: rayjobs login {made.url}{fp}   (and pastes the token)")
    else:
        _say("the door listens on the head's loopback only: for teammates set cluster.door: network "
             "(`rayjobs up door=network`), then it prints the URL and fingerprint to hand over")


@users.command("list")
@ADDRESS
@click.option("--json", "as_json", is_flag=True, help="Print the users as JSON.")
def users_list(address: Optional[str], as_json: bool) -> None:
    """The users: name, role, when added or revoked, their token ids, when last seen."""
    from rayjobs.api import people
    from rayjobs.contract import wire

    rows = run_cli(lambda: people.users(address))
    if as_json:
        click.echo(json_rows([wire.to_json(u) for u in rows]))
        return
    click.echo(f"{'NAME':<16} {'ROLE':<7} {'ADDED':<16} {'REVOKED':<16} {'LAST USED':<16} TOKENS")
    for u in rows:
        click.echo(f"{u.name:<16} {u.role:<7} {_when(u.created_at):<16} {_when(u.revoked_at):<16} "
                   f"{_when(u.last_used_at):<16} {','.join(u.tokens)}")


@users.command("revoke")
@click.argument("name")
@ADDRESS
def users_revoke(name: str, address: Optional[str]) -> None:
    """Revoke every token of NAME (refused from the next request on)."""
    from rayjobs.api import people

    u = run_cli(lambda: people.revoke(name, address))
    _say(f"revoked {u.name}: {len(u.tokens)} token(s) refused from now on")


def _when(t: Optional[float]) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"


# --------------------------------------------------------------------------- audit
@main.command("audit")
@click.option("--user", default=None, help="Only this user's entries (admins; others see their own).")
@click.option("--since", default=None, help="Only entries of this window: 7d, 12h, 30m.")
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(1, 10_000), help="The newest N entries.")
@ADDRESS
@click.option("--json", "as_json", is_flag=True, help="Print the entries as JSON.")
def audit_cmd(user: Optional[str], since: Optional[str], limit: int, address: Optional[str], as_json: bool) -> None:
    """The door's audit: every change and every refusal, who, from where, the result (oldest first)."""
    from rayjobs.api import people
    from rayjobs.contract import wire

    got = run_cli(lambda: people.audit(user=user, since=since, limit=limit, address=address))
    if as_json:
        click.echo(json_rows([wire.to_json(e) for e in got.entries]))
        return
    for e in got.entries:
        who = f"{e.user or '-'}({e.role})" if e.role else (e.user or "-")
        click.echo(f"{_when(e.at)}  {who:<18} {e.addr:<15} {e.status} {e.method} {e.path}  {e.result}")
    if got.total > len(got.entries):
        _say(f"{len(got.entries)} newest of {got.total} entries; --limit shows more")
