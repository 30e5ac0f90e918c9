"""Names the laptop and the cluster side share: what both write and read must be spelled once.

Nothing here imports Ray, Hydra or any other rayjobs module, so both sides can import it.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from typing import Optional

#: Metadata key of a runner's own Ray driver: the submission id it runs. Ray lists that driver as a
#: job of its own; rayjobs' views leave it out.
RUNNER_OF = "rayjobs_runner_of"

#: How a log line gives a moment: readable, in UTC, to the millisecond (benchmarks compute gaps from it).
STAMP_FORMAT = "%Y-%m-%d %H:%M:%S"
STAMP = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) UTC")


def stamp(t: Optional[float] = None) -> str:
    """``2026-12-01 11:27:35.123 UTC`` for epoch seconds ``t`` (default: now)."""
    t = time.time() if t is None else t
    d = datetime.fromtimestamp(t, tz=timezone.utc)
    return f"{d.strftime(STAMP_FORMAT)}.{int(d.microsecond / 1000):03d} UTC"


def parse_stamp(text: str) -> Optional[float]:
    """Epoch seconds of the first :func:`stamp` in ``text``, or None."""
    m = STAMP.search(text)
    if not m:
        return None
    d = datetime.strptime(m.group(1), STAMP_FORMAT + ".%f").replace(tzinfo=timezone.utc)
    return d.timestamp()
