"""Why an attempt failed, in one line, and whether another attempt can help.

A new attempt resumes from the last complete checkpoint, so it helps when the cause was outside
the run (a node or worker lost, the host's OOM killer, an NCCL or GPU-driver fault, a preemption,
a kill) and cannot when the cause is in the run itself: its config (it fails the same way again
at start) or the user's reward function (it raises on the same samples again). Unknown errors are
retried: rayjobs cannot tell, and a retry is bounded by ``rayjobs.max_retries``.

Pure: the runner hands in the exit code, whether it was stopped, and the attempt's output tail
(:mod:`rayjobs.oncluster.attemptlog`); the views only read the line the runner logs.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from typing import Iterable, Optional


@dataclass(frozen=True)
class Cause:
    """A failed attempt's cause: a short kind, whether a retry can help, and the evidence."""

    kind: str
    retry: bool
    detail: str = ""

    def line(self) -> str:
        """``node or worker lost: ray.exceptions.ActorDiedError: ...`` (one line, at most ~200
        characters); an unclassified error is its exception line alone (``RuntimeError: ...``)."""
        detail = " ".join(self.detail.split())
        if self.kind == "error" and detail:
            return detail[:200]
        return f"{self.kind}: {detail[:180]}" if detail else self.kind


# (kind, retried?, pattern): the first that matches the output tail wins, so the more specific
# causes come first (an ActorDiedError *because of* the OOM killer is an OOM kill).
RULES: tuple[tuple[str, bool, re.Pattern], ...] = tuple((k, r, re.compile(p, re.I)) for k, r, p in (
    ("out of memory (host)", True,
     r"ray\.exceptions\.OutOfMemoryError|running low on memory|killed by the memory monitor|oom-kill|"
     r"Out of memory: Killed process"),
    # Ray's own words for a preemption (its generic node-death message, "This can happen if the
    # node was preempted, had a hardware failure, ...", is no evidence of one: node lost below)
    ("preempted", True, r"Actor died by preemption|due to node preemption|DRAIN_PREEMPTED|dead due to draining|"
                        r"spot (?:instance )?(?:interruption|termination|preemption)"),
    ("node or worker lost", True,
     r"its node has died|NodeDiedError|ActorUnavailableError|OwnerDiedError|ObjectLostError|"
     r"actor died unexpectedly|worker died unexpectedly|worker process .{0,40}(?:died|was killed)|"
     r"\bnode\b[^.\n]{0,60}?\b(?:died|is dead|was terminated)|raylet .{0,40}(?:died|dead)|Worker exit type: (?:SYSTEM_ERROR|NODE_OUT)"),
    ("GPU out of memory", True, r"CUDA out of memory|torch\.OutOfMemoryError|CUDA error: out of memory"),
    ("NCCL/driver error", True,
     r"NCCL error|nccl\w*Error|ProcessGroupNCCL.{0,80}(?:timeout|Timeout|error)|CUDA error|cudaError\w+|"
     r"CUBLAS_STATUS_\w+|\bXid\b|uncorrectable ECC|GPU is lost|NVML_ERROR\w*|CUDA driver"),
    ("config error", False,
     r"omegaconf\.errors\.\w+|ConfigAttributeError|ConfigKeyError|ConfigCompositionException|"
     r"MissingMandatoryValue|hydra\.errors\.\w+|Could not override|is not in struct|"
     r"Total available GPUs \S+ is less than total desired GPUs|FileNotFoundError: .{0,200}\.(?:parquet|jsonl?)"),
))
EXCEPTION = re.compile(r"^(?:\(\w+ pid=\d+(?:, ip=[\d.]+)?\)\s*)?"
                       r"([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)(?:\([\w.]+\))?(?::.*)?)$")
FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\w+)')
#: A command's own one-line refusal (argparse's ``prog: error: ...``, a script's ``error: ...``).
ERROR_LINE = re.compile(r"^(?:\(\w+ pid=\d+(?:, ip=[\d.]+)?\)\s*)?(?:[\w.-]+: )?error: (.+)$", re.M)


def last_exception(tail: str) -> Optional[str]:
    """The last ``SomeError: message`` line (a traceback's last line), or None."""
    for line in reversed(tail.splitlines()):
        m = EXCEPTION.match(line.strip())
        if m:
            return m.group(1)
    return None


def reward_frame(tail: str, reward_files: Iterable[str]) -> Optional[str]:
    """``my_reward.py:12`` when the last traceback went through the user's reward function.

    A frame counts when its file is the configured ``custom_reward_function.path`` (by name: the
    path on the node differs from the one given), or it is a ``compute_score`` outside verl.
    """
    names = {f.rsplit("/", 1)[-1] for f in reward_files if f}
    hit = None
    for path, line, func in FRAME.findall(tail[-200_000:]):
        base = path.rsplit("/", 1)[-1]
        if base in names or (func == "compute_score" and "/verl/" not in path and "site-packages" not in path):
            hit = f"{base}:{line}"
    return hit


def classify(code: int, tail: str, *, reward_files: Iterable[str] = ()) -> Cause:
    """The cause of an attempt that ended with ``code`` (negative: killed by that signal) and
    printed ``tail`` last; called only for a failure that was not a stop."""
    exc = last_exception(tail)
    where = reward_frame(tail, reward_files) if exc else None
    if where:
        return Cause("error in your reward function", False, f"{exc} ({where})")
    for kind, retry, pattern in RULES:
        m = pattern.search(tail)
        if m:
            return Cause(kind, retry, exc or m.group(0))
    if code < 0 or code in (128 + signal.SIGKILL, 128 + signal.SIGTERM):
        sig = -code if code < 0 else code - 128
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
        kind = "killed" if sig == signal.SIGKILL else "preempted"
        why = "the host's OOM killer, or a kill from outside" if sig == signal.SIGKILL else "a stop that was not rayjobs'"
        return Cause(kind, True, f"the trainer got {name} ({why})")
    said = ERROR_LINE.findall(tail[-200_000:])
    if not exc and said:  # exit 2 is a usage error: the same input fails again
        return Cause("error", code != 2, f"error: {said[-1].strip()}")
    return Cause("error", True, exc or f"exit code {code}")


def no_progress(at_step: int, total: int) -> Cause:
    """An attempt that exited 0 without a training step, short of its total (verl at an epoch
    boundary: verl-project/verl#7401): the same checkpoint gives the same result, so no retry."""
    return Cause("no progress", False,
                 f"exited 0 at step {at_step} of {total} without training a step; resuming again would do the same")
