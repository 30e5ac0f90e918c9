"""One attempt of a simulated job on its GPUs: when each step and checkpoint is done (pure).

An attempt is admitted at ``start``, spends ``startup_s`` starting (processes, model load, the
rollout engine), then trains from ``from_step`` (a checkpoint step, or 0): steps of ``step_s``,
and after every ``ckpt_every``-th step a save of ``ckpt_s`` (the trainer waits for it, as verl's
synchronous save does). What a stop at a moment costs is the steps since the last completed save.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from rayjobs.sim.trace import TraceJob


@dataclass(frozen=True)
class Attempt:
    """``job``'s attempt admitted at ``start`` that resumes after step ``from_step``."""

    job: TraceJob
    start: float
    from_step: int = 0
    startup_s: float = 0.0
    number: int = 1

    @property
    def train_start(self) -> float:
        return self.start + self.startup_s

    def _cycle(self) -> float:
        return self.job.ckpt_every * self.job.step_s + self.job.ckpt_s

    def step_done(self, k: int) -> float:
        """When step ``k`` (> ``from_step``) is done (its save, if it has one, comes after)."""
        j, s0 = self.job, self.from_step
        saves = ((k - 1) // j.ckpt_every - s0 // j.ckpt_every) if j.ckpt_every else 0
        return self.train_start + (k - s0) * j.step_s + max(0, saves) * j.ckpt_s

    def saved(self, m: int) -> float:
        """When the checkpoint of step ``m`` (a multiple of ``ckpt_every``) is saved."""
        return self.step_done(m) + self.job.ckpt_s

    def at(self, t: float) -> tuple[int, int, float]:
        """At ``t``: (steps done, the last saved checkpoint's step, when it was saved; ``from_step``
        and the attempt's start when none was saved yet)."""
        j, s0 = self.job, self.from_step
        e = t - self.train_start
        if e <= 0:
            return s0, s0, self.start
        if not j.ckpt_every:
            return min(j.steps, s0 + int(e // j.step_s)), s0, self.start
        # s0 is a checkpoint step (or 0): the attempt runs in whole cycles of ckpt_every steps + a save
        first = j.ckpt_every - s0 % j.ckpt_every  # steps to its first checkpoint step
        if e < first * j.step_s + j.ckpt_s:
            return min(j.steps, s0 + int(e // j.step_s), s0 + first), s0, self.start
        cyc = self._cycle()
        n = 1 + int((e - first * j.step_s - j.ckpt_s) // cyc)  # saves completed
        last = s0 + first + (n - 1) * j.ckpt_every
        if last >= j.steps:
            last = (j.steps - 1) // j.ckpt_every * j.ckpt_every
            n = (last - s0 - first) // j.ckpt_every + 1
        rest = e - first * j.step_s - j.ckpt_s - (n - 1) * cyc
        done = min(j.steps, last + min(j.ckpt_every, int(rest // j.step_s)))
        return done, last, self.saved(last)

    def end(self) -> float:
        """When its last step is done (no save after it)."""
        return self.step_done(self.job.steps)

    def next_saved(self, t: float) -> Optional[tuple[int, float]]:
        """(step, when saved) of the first checkpoint saved after ``t``; None if none comes before the end."""
        j = self.job
        if not j.ckpt_every:
            return None
        done, last, _ = self.at(t)
        m = max(last + j.ckpt_every, math.ceil(max(done, self.from_step + 1) / j.ckpt_every) * j.ckpt_every)
        while m < j.steps:
            when = self.saved(m)
            if when > t:
                return m, when
            m += j.ckpt_every
        return None

    def first_saved_from(self, step: int) -> Optional[tuple[int, float]]:
        """(step, when saved) of the first checkpoint at or past ``step``; None if none before the end."""
        j = self.job
        if not j.ckpt_every:
            return None
        m = max(math.ceil(step / j.ckpt_every) * j.ckpt_every, self.from_step + j.ckpt_every)
        return (m, self.saved(m)) if m < j.steps else None
