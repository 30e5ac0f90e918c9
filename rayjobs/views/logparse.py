"""Read verl's progress out of what a job leaves behind: its console log and its metrics JSONL.

The console lines arrive the way Ray forwards them (``../shared/notes/verl-facts.md`` §6)::

    \\x1b[36m(TaskRunner pid=1234)\\x1b[0m step:12 - actor/pg_loss:np.float64(-0.01) - ...
    \\rTraining Progress:  40%|####      | 4/10

so a line is cleaned (ANSI stripped, the last ``\\r`` segment kept, the ``(Actor pid=..)`` prefix
dropped) before it is matched. :class:`Progress` folds lines into the state a live view shows;
:mod:`rayjobs.views.metricfiles` reads verl's ``file`` logger output. Pure Python, no I/O.
"""

from __future__ import annotations

import ast
import math
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Optional

if TYPE_CHECKING:
    from rayjobs.contract.wire import JobView

#: CSI / OSC escape sequences (colours, cursor moves, hyperlinks).
ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
#: Ray's prefix on lines forwarded from actors/tasks: ``(TaskRunner pid=1234, ip=10.0.0.2) ``.
PREFIX = re.compile(r"^\((?P<actor>[\w.:-]+) pid=(?P<pid>\d+)(?:, ip=[^)]*)?\)\s?")
STEP = re.compile(r"(?:^|\s)step:(?P<step>\d+) - (?P<rest>.*)$")
TOTAL = re.compile(r"Total training steps: (?P<total>\d+)")
WANDB = re.compile(r"https?://(?:[\w.-]*\.)?wandb\.ai/\S+/runs/[\w-]+")
ATTEMPT = re.compile(r"^\[rayjobs\] attempt (?P<n>\d+)\b")
#: The runner's one-line causes (rayjobs.oncluster.failurecause): each failed attempt's, the job's.
FAILED = re.compile(r"^\[rayjobs\] (?:attempt (?P<n>\d+)|job) failed: (?P<cause>.+?)"
                    r"(?: \((?:not retried|no retry left|RAYJOBS_MAX_ATTEMPTS)[^\n]*\))?$")
#: The runner's lines on verl's checkpoints (rayjobs.oncluster.checkpointwatch): complete ones only.
CHECKPOINT = re.compile(r"^\[rayjobs\] (?:checkpoint saved|last checkpoint): step (?P<step>\d+)\b")
VALDICT = re.compile(r"(?P<which>Initial|Final) validation metrics: (?P<d>\{.*\})\s*$")
NUMBER = re.compile(
    r"^(?:np\.\w+\(|numpy\.\w+\(|tensor\()?\s*"
    r"(?P<v>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)|True|False)"
    r"\s*(?:,\s*dtype=[\w.]+)?\)?$"
)

#: The numbers a live view shows, in order: (label, candidate keys; the first present wins).
HEADLINE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("score", ("critic/score/mean",)),
    ("reward", ("critic/rewards/mean",)),
    ("kl", ("actor/kl_loss", "actor/reward_kl_penalty", "actor/ppo_kl", "critic/kl")),
    ("resp_len", ("response_length/mean",)),
    ("s/step", ("timing_s/step",)),
)


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


def clean(line: str) -> str:
    """A raw log line as a terminal would finally show it, without colours.

    ANSI codes go, and of ``\\r``-separated segments (tqdm redraws) only the last non-empty one
    stays. Ray's ``(Actor pid=..)`` prefix is kept (it says where the line came from).
    """
    line = strip_ansi(line.rstrip("\n"))
    if "\r" in line:
        segs = [s for s in line.split("\r") if s.strip()]
        prefix = PREFIX.match(line)
        last = segs[-1] if segs else ""
        if prefix and not PREFIX.match(last) and len(segs) > 1:
            last = prefix.group(0) + last
        line = last
    return line


#: An exception line as Python prints it: ``ValueError: ...``, ``ray.exceptions.RayTaskError(ValueError): ...``.
EXCEPTION = re.compile(r"^(?P<name>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)(?:\([\w.]+\))?)(?::\s*(?P<msg>.*))?$")


def failure_line(text: str) -> Optional[str]:
    """The last exception line of a log (``ValueError: Total available GPUs 0 is less than ...``).

    Looks at cleaned lines, with Ray's ``(Actor pid=..)`` prefix dropped; a bare name without a
    message (``KeyboardInterrupt``) or Ray's wrapper (``RayTaskError(X): ray::Actor.method()``)
    counts only when no other exception line is there.
    """
    bare = None
    for line in reversed(text.splitlines()):
        m = EXCEPTION.match(body(line).strip())
        if not m:
            continue
        msg = (m.group("msg") or "").strip()
        if msg and not msg.startswith("ray::"):  # Ray's wrapper names a place, not the cause
            return f"{m.group('name')}: {msg}"
        bare = bare or (f"{m.group('name')}: {msg}" if msg else m.group("name"))
    return bare


def body(line: str) -> str:
    """A cleaned line without Ray's ``(Actor pid=..)`` prefix."""
    return PREFIX.sub("", line, count=1)


def number(text: str) -> Optional[float]:
    """``"np.float64(-0.5)"`` / ``"0.5"`` / ``"True"`` -> float; anything else -> None."""
    m = NUMBER.match(text.strip())
    if not m:
        return None
    v = m.group("v")
    if v in ("True", "False"):
        return 1.0 if v == "True" else 0.0
    return float(v)


def parse_step(line: str) -> Optional[tuple[int, dict[str, float]]]:
    """``step:12 - k:v - ...`` (anywhere in a cleaned, unprefixed segment) -> (12, {k: v})."""
    m = STEP.search(line)
    if not m:
        return None
    data: dict[str, float] = {}
    for pair in m.group("rest").split(" - "):
        key, sep, val = pair.rpartition(":")
        if not sep or not key:
            continue
        x = number(val)
        if x is not None:
            data[key.strip()] = x
    return int(m.group("step")), data


def parse_dict(text: str) -> dict[str, float]:
    """A printed metrics dict (``{'val-core/x': np.float64(0.5)}``) -> {key: float}."""
    text = re.sub(r"(?:np|numpy)\.\w+\(([^()]*)\)", r"\1", text)
    text = re.sub(r"\bnan\b", "None", text)
    try:
        d = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {}
    out = {}
    if isinstance(d, dict):
        for k, v in d.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[str(k)] = float(v)
    return out


def headline(data: dict[str, float]) -> list[tuple[str, str, float]]:
    """[(label, key, value)] of the headline metrics present in ``data``."""
    out = []
    for label, keys in HEADLINE:
        for k in keys:
            if k in data:
                out.append((label, k, data[k]))
                break
    return out


def val_core(data: dict[str, float]) -> Optional[tuple[str, float]]:
    """The first ``val-core/*`` metric in ``data`` (verl's headline validation number)."""
    for k, v in data.items():
        if k.startswith("val-core/"):
            return k, v
    return None


#: What :meth:`Progress.feed_kind` says a line was.
KINDS = ("step", "total", "wandb", "admitted", "checkpoint_saved", "last_checkpoint", "attempt_failed", "job_failed",
         "attempt", "val", "resumed")


@dataclass
class Progress:
    """What the log says about a run so far; fed one raw line at a time (constant memory)."""

    step: Optional[int] = None
    total: Optional[int] = None
    attempt: Optional[int] = None
    wandb_url: Optional[str] = None
    last: dict[str, float] = field(default_factory=dict)  #: metrics of the latest step line
    val: Optional[tuple[str, float, Optional[int]]] = None  #: latest val-core (key, value, step)
    resumed_from: Optional[str] = None
    checkpoint: Optional[int] = None  #: step of the last complete checkpoint (the runner's lines)
    failures: list[str] = field(default_factory=list)  #: ``attempt N: <cause>``, the last 20
    cause: Optional[str] = None  #: the latest failure's cause (the job's, once the runner gave up)
    step_times: list[float] = field(default_factory=list)  #: recent timing_s/step values
    started_at: float = field(default_factory=time.monotonic)
    _first: Optional[tuple[int, float]] = None  #: (step, arrival time) of the first step seen

    def feed(self, raw: str) -> bool:
        """Fold one raw log line in; True if it changed anything a view shows."""
        return self.feed_clean(clean(raw))

    def feed_clean(self, line: str) -> bool:
        """Fold one cleaned line in; True if it changed anything a view shows."""
        return self.feed_kind(line) is not None

    def feed_kind(self, line: str) -> Optional[str]:
        """Fold one cleaned line in; what it was (one of :data:`KINDS`), None for any other line.

        The one place a line is recognised: the views fold it into their state, the JSON step
        records (:mod:`rayjobs.views.steplog`) also turn some kinds into objects.
        """
        text = body(line)
        if "step:" in text:
            parsed = parse_step(text)
            if parsed:
                self.on_step(*parsed)
                return "step"
        if "Total training steps" in text:
            m = TOTAL.search(text)
            if m:
                self.total = int(m.group("total"))
                return "total"
        if "wandb.ai" in text:
            m = WANDB.search(text)
            if m:
                self.wandb_url = m.group(0)
                return "wandb"
        if text.startswith("[rayjobs] "):
            return self._runner_line(text)
        if "validation metrics:" in text:
            m = VALDICT.search(text)
            if m:
                vc = val_core(parse_dict(m.group("d")))
                if vc:
                    self.val = (vc[0], vc[1], self.step)
                    return "val"
        if text.startswith("Resuming from "):
            self.resumed_from = text[len("Resuming from "):].strip()
            return "resumed"
        return None

    def _runner_line(self, text: str) -> Optional[str]:
        """A ``[rayjobs] ...`` line of the job's runner (rayjobs.oncluster.runner, checkpointwatch)."""
        if text.startswith("[rayjobs] admitted "):
            return "admitted"
        m = CHECKPOINT.match(text)
        if m:
            self.checkpoint = int(m.group("step"))
            return "checkpoint_saved" if text.startswith("[rayjobs] checkpoint saved") else "last_checkpoint"
        if " failed: " in text:
            m = FAILED.match(text)
            if m:
                self.on_failure(m.group("n"), m.group("cause"))
                return "attempt_failed" if m.group("n") else "job_failed"
        if text.startswith("[rayjobs] attempt "):
            m = ATTEMPT.match(text)
            if m:
                self.attempt = int(m.group("n"))
                self._first = None
                self.step_times.clear()
                return "attempt"
        return None

    def on_failure(self, attempt: Optional[str], cause: str) -> None:
        if attempt is not None:
            if self.attempt is None:  # a log read from its middle (a kept tail): the line names it
                self.attempt = int(attempt)
            self.failures = (self.failures + [f"attempt {attempt}: {cause}"])[-20:]
        self.cause = cause

    def on_step(self, step: int, data: dict[str, float]) -> None:
        self.step = step
        self.last = data
        vc = val_core(data)
        if vc:
            self.val = (vc[0], vc[1], step)
        t = data.get("timing_s/step")
        if t is not None and math.isfinite(t):
            self.step_times = (self.step_times + [t])[-20:]
        if self._first is None:
            self._first = (step, time.monotonic())

    def eta_s(self) -> Optional[float]:
        """Seconds left: recent ``timing_s/step`` × steps left (else the observed step rate)."""
        if self.step is None or not self.total:
            return None
        left = max(0, self.total - self.step)
        if self.step_times:
            return left * sum(self.step_times) / len(self.step_times)
        if self._first and self.step > self._first[0]:
            rate = (time.monotonic() - self._first[1]) / (self.step - self._first[0])
            return left * rate
        return None

    def summary(self) -> dict[str, Any]:
        """JSON-able snapshot (``rayjobs status``)."""
        out: dict[str, Any] = {"step": self.step, "total_steps": self.total, "wandb_url": self.wandb_url,
                               "checkpoint_step": self.checkpoint}
        if self.cause:
            out["cause"], out["failures"] = self.cause, list(self.failures)
        out["metrics"] = {k: v for _, k, v in headline(self.last)}
        if self.val:
            out["metrics"][self.val[0]] = self.val[1]
        return out


def clean_block(text: str) -> str:
    """:func:`clean` for a block of complete lines at once (fast when there is nothing to clean)."""
    if "\x1b" in text:
        text = ANSI.sub("", text)
    if "\r" in text:
        lines = text.split("\n")
        text = "\n".join(clean(x) if "\r" in x else x for x in lines)
    return text


#: Substrings of the only lines :class:`Progress` cares about (a block without them is skipped).
MARKERS = ("step:", "Total training steps", "wandb.ai", "[rayjobs] ", "validation metrics:", "Resuming from ")


def feed_block(progress: "Progress", text: str) -> bool:
    """Feed a block of cleaned lines to ``progress``; only lines with a marker are parsed."""
    if not any(m in text for m in MARKERS):
        return False
    changed = False
    for line in text.split("\n"):
        if any(m in line for m in MARKERS):
            changed = progress.feed_clean(line) or changed
    return changed


def parse_lines(lines: Iterable[str]) -> Progress:
    p = Progress()
    for line in lines:
        p.feed(line)
    return p


def failure_summary(job: Optional["JobView"], log_tail: bytes) -> str:
    """One line for a FAILED job: the runner's cause line, else the log's last exception line,
    else Ray's message (its first line).

    Ray's message is "Job entrypoint command failed with exit code 1, last available logs
    (truncated to 20,000 chars): ..." followed by the log's *start*: cut at 300 characters it ends
    mid-path and never names the exception.
    """
    text = clean_block(log_tail.decode("utf-8", "replace"))
    p = parse_lines(text.splitlines()[-2000:])
    if p.cause:  # the runner's own one-line cause (rayjobs.oncluster.failurecause)
        return p.cause[:300]
    err = failure_line(text)
    msg = clean(str((job.message if job is not None else None) or "")).split(", last available logs")[0]
    msg = " ".join(msg.split())[:200]
    if err:
        return f"{err[:300]}" + (f" ({msg})" if msg else "")
    return msg or "no message from Ray"


# --------------------------------------------------------------------------- bytes -> lines
class LineSplitter:
    """Bytes in (any chunking), complete ``\\n``-terminated lines out; flat memory.

    A line that grows past ``cap`` bytes without a newline (a tqdm bar redrawn with ``\\r``
    only) is cut down to its last ``\\r`` segment, or flushed as a line if it has none.
    """

    def __init__(self, cap: int = 1 << 20) -> None:
        self.buf = bytearray()
        self.cap = cap

    def feed(self, chunk: bytes) -> list[str]:
        self.buf += chunk
        if b"\n" not in chunk and len(self.buf) <= self.cap:
            return []
        *lines, rest = bytes(self.buf).split(b"\n")
        self.buf = bytearray(rest)
        if len(self.buf) > self.cap:
            cut = self.buf.rfind(b"\r")
            if cut > 0:
                del self.buf[:cut]
            else:
                lines.append(bytes(self.buf))
                self.buf = bytearray()
        return [x.decode("utf-8", "replace") for x in lines]

    def feed_text(self, chunk: bytes) -> str:
        """Like :meth:`feed`, but the complete lines come back as one ``\n``-terminated string."""
        self.buf += chunk
        if b"\n" not in chunk and len(self.buf) <= self.cap:
            return ""
        cut = self.buf.rfind(b"\n") + 1
        block = bytes(self.buf[:cut])
        del self.buf[:cut]
        if len(self.buf) > self.cap:
            r = self.buf.rfind(b"\r")
            if r > 0:
                del self.buf[:r]
            else:
                block += bytes(self.buf) + b"\n"
                self.buf = bytearray()
        return block.decode("utf-8", "replace")

    def flush(self) -> list[str]:
        """The trailing partial line, if any (at the end of a log)."""
        if not self.buf:
            return []
        line = bytes(self.buf).decode("utf-8", "replace")
        self.buf = bytearray()
        return [line]
