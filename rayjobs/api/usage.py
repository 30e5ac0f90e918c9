"""``rayjobs usage``: where the team's GPU-hours went (the head's split, :mod:`rayjobs.oncluster.usage`)."""

from __future__ import annotations

import re
import time
from typing import Any, Optional

from rayjobs.errors import ConfigError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def since_ts(text: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """``7d`` / ``12h`` / ``30m`` -> the epoch second that long ago; None for none.

    Raises:
        ConfigError: not a number and a unit (s, m, h, d, w).
    """
    if not text:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if not m:
        raise ConfigError(f"--since {text!r}: give a duration such as 7d, 12h or 30m (units s, m, h, d, w)")
    return (time.time() if now is None else now) - float(m.group(1)) * _UNITS[m.group(2)]


def usage(*, user: Optional[str] = None, sweep: Optional[str] = None, since: Optional[str] = None,
          address: Optional[str] = None) -> dict[str, Any]:
    """The GPU-seconds the queue handed out, split into productive, redone, start-up and held idle
    (and the time waited), in all, per user, per sweep and per job; ETTR per row.

    Args:
        user, sweep: only these jobs. since: only jobs queued or active in that window (``7d``).
        address: the cluster (default: the settings' target).

    Returns:
        :class:`rayjobs.contract.wire.UsageReply` as a dict.

    Raises:
        ConfigError: a bad ``since``. ClusterUnreachable: no cluster answers.
    """
    from rayjobs.client.connection import connect

    t = since_ts(since)
    d = connect(address, address_from="--address", quiet=True)
    return d.queue.usage(user=user, sweep=sweep, since=t)
