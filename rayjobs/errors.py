"""Errors with one-line, actionable messages.

Every error a user can cause is a :class:`RayjobsError`: the CLI prints ``error: <message>`` on
stderr and exits with :attr:`RayjobsError.exit_code` (2 for bad input, as the contract says).
Tracebacks are shown only with ``RAYJOBS_DEBUG=1``.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, NoReturn, TypeVar

# The one did-you-mean (contract.names: the head resolves ids with it too), named here beside the errors
from rayjobs.contract.names import closest, did_you_mean  # noqa: F401

T = TypeVar("T")


class RayjobsError(Exception):
    """Base class: a one-line message saying what was wrong and what to do next."""

    exit_code = 2


class ConfigError(RayjobsError):
    """The composed configuration is invalid (unknown experiment, key, wrong type...)."""


class ClusterUnreachable(RayjobsError):
    """No Ray dashboard answered at the configured address."""


class JobNotFound(RayjobsError):
    """No job (or no unique job) matches the given id or prefix."""


class NoSuchJob(JobNotFound):
    """Nothing matches the given id or prefix (not: several match)."""


class SubmitError(RayjobsError):
    """The cluster refused the submission."""


def says_no_such_job(e: BaseException) -> bool:
    """Does this error of Ray's Jobs API say it has no such job? Its own words only: a bare "404"
    in the text is also in dashboard ports and job ids (``...-201404-...``), whose every failure
    it then took for a job Ray had lost."""
    if isinstance(e, JobNotFound):
        return True
    text = str(e)
    return "does not exist" in text or "status code 404" in text


def short_reason(e: BaseException) -> str:
    """A few words for an exception (requests' messages run to several hundred characters)."""
    text = " ".join(str(e).split())
    low = text.lower()
    for needle, words in (("refused", "connection refused"), ("reset", "connection reset"),
                          ("ended prematurely", "connection closed"), ("timed out", "timed out"),
                          ("name or service", "unknown host"), ("broken pipe", "connection closed")):
        if needle in low:
            return words
    return text[:160] or type(e).__name__


def debug() -> bool:
    """True when ``RAYJOBS_DEBUG=1``: show tracebacks instead of one-line errors."""
    return os.environ.get("RAYJOBS_DEBUG", "") not in ("", "0", "false")


def run_cli(fn: Callable[[], T]) -> T:
    """Run ``fn``; turn a :class:`RayjobsError` into ``error: ...`` on stderr + its exit code."""
    try:
        return fn()
    except RayjobsError as e:
        if debug():
            raise
        fail(str(e), e.exit_code)
    except KeyboardInterrupt:
        if debug():
            raise
        fail("interrupted", 130)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print a one-line error and exit."""
    first = " ".join(str(message).split())  # one line, whatever the cause contained
    print(f"error: {first}", file=sys.stderr, flush=True)
    sys.exit(code)
