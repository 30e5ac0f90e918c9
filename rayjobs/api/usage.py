"""``rayjobs usage``: where the team's GPU-hours went (the head's split, :mod:`rayjobs.oncluster.usage`)."""

from __future__ import annotations

import re
import time
from typing import Any, Callable, Optional

from rayjobs.contract import wire
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
          address: Optional[str] = None, say: Optional[Callable[[str], None]] = None) -> dict[str, Any]:
    """The GPU-seconds the queue handed out, split into productive, redone, start-up and held idle
    (and the time waited), in all, per user, per sweep and per job; ETTR per row.

    Every answer's per-job rows are kept in the local record; when the cluster does not answer,
    the split is summed from those (``source`` "record", ``at`` the oldest row's time) and ``say``
    is told so -- jobs the laptop never got a usage answer for are not in it.

    Args:
        user, sweep: only these jobs. since: only jobs queued or active in that window (``7d``).
        address: the cluster (default: the settings' target). say: where the note goes.

    Returns:
        :class:`rayjobs.contract.wire.UsageReply` as a dict.

    Raises:
        ConfigError: a bad ``since``. ClusterUnreachable: no cluster answers and the local record
        has no usage of it (a stopped embedded head is not started: the record's answer, empty or not).
    """
    from rayjobs.client.connection import connect
    from rayjobs.errors import ClusterUnreachable
    from rayjobs import ledger

    t = since_ts(since)
    try:
        d = connect(address, address_from="--address", quiet=True, start=False)  # a read
        reply = d.queue.usage(user=user, sweep=sweep, since=t)
    except ClusterUnreachable as e:
        return _from_record(address, user, sweep, t, e, say)
    try:
        ledger.remember_usage(d.target.key, reply.jobs or {}, float(reply.at or time.time()))
    except OSError:
        pass  # a read-only home: the answer is still shown
    return wire.to_json(reply)


def _from_record(address: Optional[str], user: Optional[str], sweep: Optional[str], since: Optional[float],
                 err: Exception, say: Optional[Callable[[str], None]]) -> dict[str, Any]:
    from datetime import datetime

    from rayjobs import settings
    from rayjobs import ledger
    from rayjobs.views import usagerecord
    from rayjobs.views.localrows import head_down_line

    rows = ledger.usage_rows(settings.resolve_target(address).key)
    if not rows and not head_down_line(err, ""):  # a stopped embedded head: an empty answer, said so
        raise err
    doc = usagerecord.from_record(rows, user=user, sweep=sweep, since=since)
    if say:
        when = datetime.fromtimestamp(doc["at"]).astimezone().isoformat(timespec="seconds") if doc["at"] else "?"
        what = f"the usage below is the local record's, as of {when} (jobs since then are not in it)" if rows \
            else "the local record keeps no usage of it"
        say(head_down_line(err, what) or f"{err}; {what}")
    return doc
