"""Failed authentications per client address: after a burst, the address is refused for a while.

A sliding window: :data:`BURST` failures within :data:`WINDOW_S` seconds start a block (HTTP 429)
of :data:`FIRST_BLOCK_S`, doubled for each further block (at most :data:`MAX_BLOCK_S`); an
address with no block for :data:`FORGET_S` starts again at the first length. Pure, with a clock
(the tests give a fake one); the memory is bounded (:data:`MAX_ADDRESSES`, the oldest dropped).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable, Optional

BURST = 10
WINDOW_S = 60.0
FIRST_BLOCK_S = 30.0
MAX_BLOCK_S = 15 * 60.0
FORGET_S = 3600.0
MAX_ADDRESSES = 10_000


@dataclass
class _Address:
    failures: deque = field(default_factory=deque)  #: times of the failures in the window
    until: float = 0.0  #: blocked until then
    blocks: int = 0  #: blocks so far (the next one is twice the last)
    last_block: float = 0.0


class FailureLimiter:
    """Counts failed authentications per address; says which addresses are blocked."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, burst: int = BURST,
                 window_s: float = WINDOW_S, first_s: float = FIRST_BLOCK_S, max_s: float = MAX_BLOCK_S) -> None:
        self.clock, self.burst, self.window_s, self.first_s, self.max_s = clock, burst, window_s, first_s, max_s
        self._seen: "OrderedDict[str, _Address]" = OrderedDict()

    def blocked(self, addr: str) -> Optional[float]:
        """Seconds ``addr`` stays refused, or None."""
        a = self._seen.get(addr)
        left = (a.until - self.clock()) if a else 0.0
        return left if left > 0 else None

    def failed(self, addr: str) -> Optional[float]:
        """Count a failure of ``addr``; the length of the block it starts now (None: no block)."""
        now = self.clock()
        a = self._seen.pop(addr, None) or _Address()
        self._seen[addr] = a  # the most recent last
        while len(self._seen) > MAX_ADDRESSES:
            self._seen.popitem(last=False)
        if a.blocks and now - a.last_block > FORGET_S:
            a.blocks = 0
        a.failures.append(now)
        while a.failures and a.failures[0] <= now - self.window_s:
            a.failures.popleft()
        if len(a.failures) < self.burst or a.until > now:
            return None
        length = min(self.first_s * (2 ** a.blocks), self.max_s)
        a.blocks += 1
        a.until, a.last_block = now + length, now
        a.failures.clear()
        return length
