"""``rayjobs ui``: the team's page in the browser, already logged in.

The CLI asks the door (with the user's login, or the owner's cluster token: what ``rayjobs list``
uses) for a one-time login code (``POST /v1/page/link``), prints the link on stdout and opens it
with Python's :mod:`webbrowser`. The link is a secret until used -- good once, for a minute -- so it
goes to the terminal only: never to a log. Through ``rayjobs connect``'s tunnel it is the tunnel's
loopback URL.
"""

from __future__ import annotations

from typing import Optional

import click

from rayjobs.cli.common import ADDRESS, _say
from rayjobs.cli.group import main
from rayjobs.errors import run_cli


def page_link(address: Optional[str]) -> tuple[str, float, Optional[str]]:
    """(the one-time login URL, seconds it is good for, the door's pinned fingerprint if https)."""
    from rayjobs.api import people

    door = people.door(address)
    link = door.page_link()
    return door.url.rstrip("/") + link.path, link.expires_in, getattr(door, "fingerprint", None)


@main.command("ui")
@ADDRESS
@click.option("--no-open", is_flag=True, help="Print the one-time link only; open no browser.")
def ui_cmd(address: Optional[str], no_open: bool) -> None:
    """Open the team's page (the queue, jobs, sweeps, the team) in your browser, logged in as you:
    a one-time link, good once within a minute, printed here and opened."""
    url, ttl, fingerprint = run_cli(lambda: page_link(address))
    click.echo(url)
    _say(f"a one-time login link for the team's page, good once within {ttl:.0f} s (a secret: share the page's "
         f"address, not this link)")
    if fingerprint:
        _say(f"the browser will warn of the door's own certificate: accept it only if its SHA-256 is {fingerprint}")
    if no_open:
        return
    import webbrowser

    if not webbrowser.open(url):
        _say("no browser to open here: open the link above in yours")
