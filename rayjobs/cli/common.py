"""What the command modules share: the ``--address`` option, chatter on stderr, exits, a closed pipe."""

from __future__ import annotations

import json
import sys
from typing import Any, Optional

import click

ADDRESS = click.option("--address", default=None, metavar="URL",
                       help="Ray dashboard address (default: RAY_API_SERVER_ADDRESS, RAY_ADDRESS, the connected cluster, or the embedded local one).")


def _say(msg: str) -> None:
    click.echo(f"rayjobs: {msg}", err=True)


def _open(address: Optional[str], start: bool = True) -> Any:
    """The cluster's client for ``address`` (the settings' if None; :func:`rayjobs.api.job.connect`);
    ``start``: start a stopped embedded head (False for a read: ``LocalHeadDown``)."""
    from rayjobs.api.job import connect

    return connect(address, start=start)


def _exit(code: int) -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    sys.exit(code)


def _pipe_safe(fn: Any) -> Any:
    """``rayjobs tail ID | head``: a closed stdout ends the command quietly (exit 0)."""
    import os

    def go() -> int:
        try:
            return fn()
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes at exit
            return 0

    return go


def json_rows(rows: list[Any]) -> str:
    """A JSON list with one compact object per line: valid JSON, greppable, and written by json's C
    encoder (``indent`` makes json fall back to its pure-Python one: ~1 s for 10,000 rows)."""
    if not rows:
        return "[]"
    enc = json.JSONEncoder(default=str).encode  # one encoder: json.dumps(default=...) builds one per call
    return "[\n" + ",\n".join(map(enc, rows)) + "\n]"
