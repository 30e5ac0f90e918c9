"""How ``rayjobs tail`` shows a job: a rich live panel above the raw log on a terminal, plain lines otherwise.

Both views take blocks of cleaned log lines (:func:`rayjobs.views.logparse.clean_block`) and the job's
latest details; the live one also renders :class:`rayjobs.views.logparse.Progress` (step N/total, ETA,
verl's headline metrics, the latest ``val-core/*`` value, attempt, status, W&B run).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Optional, TextIO

from rayjobs.contract.meta import JobMeta
from rayjobs.contract.status import TERMINAL, Status
from rayjobs.contract.wire import JobView
from rayjobs.views.logparse import Progress, headline

STATUS_STYLE = {Status.RUNNING.value: "bold green", Status.SUCCEEDED.value: "bold green", Status.FAILED.value: "bold red",
                Status.STOPPED.value: "bold yellow", Status.PENDING.value: "bold cyan", Status.QUEUED.value: "bold cyan"}


def fmt_duration(s: Optional[float]) -> str:
    if s is None:
        return "?"
    s = int(max(0, s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def fmt_num(v: float) -> str:
    if v != v:  # nan
        return "nan"
    a = abs(v)
    if a and (a < 1e-3 or a >= 1e5):
        return f"{v:.3g}"
    if a >= 100:
        return f"{v:.1f}"
    return f"{v:.4g}"


def status_line(job_id: str, status: str, p: Progress) -> str:
    """One plain line: ``ID RUNNING attempt 1 step 12/100 ETA 4:31 score 0.53 ...``."""
    parts = [job_id, status]
    if p.attempt:
        parts.append(f"attempt {p.attempt}")
    if p.step is not None:
        parts.append(f"step {p.step}/{p.total or '?'}")
        eta = p.eta_s()
        if eta is not None and status not in TERMINAL:
            parts.append(f"ETA {fmt_duration(eta)}")
    parts += [f"{label} {fmt_num(v)}" for label, _, v in headline(p.last)]
    if p.val:
        parts.append(f"{p.val[0]} {fmt_num(p.val[1])}")
    if p.wandb_url:
        parts.append(f"W&B {p.wandb_url}")
    if p.cause:
        parts.append(f"{'failed' if status == Status.FAILED else 'last failure'}: {p.cause}")
    return " · ".join(parts)


class PlainView:
    """Not a terminal: the cleaned log lines on stdout, nothing else (no ANSI codes)."""

    def __init__(self, out: Optional[TextIO] = None) -> None:
        self.out = out or sys.stdout

    def __enter__(self) -> "PlainView":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.out.flush()

    def write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()

    def update(self, job: Optional[JobView], progress: Progress, changed: bool = False) -> None:
        pass


class LiveView:
    """A terminal: the raw log scrolls, a live panel stays at the bottom (rich)."""

    def __init__(self, job_id: str, refresh_s: float = 0.25, console: Any = None) -> None:
        from rich.console import Console
        from rich.live import Live

        self.job_id = job_id
        self.console = console or Console()
        self.live = Live(console=self.console, auto_refresh=False, transient=False, redirect_stdout=False,
                         redirect_stderr=False)
        self.refresh_s = refresh_s
        self.next = 0.0
        self.started = time.monotonic()
        self.job: Optional[JobView] = None  #: None until the follower has read the job once
        self.progress = Progress()

    def __enter__(self) -> "LiveView":
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.live.update(self.render(), refresh=True)
        self.live.__exit__(*exc)

    def write(self, text: str) -> None:
        from rich.text import Text

        if not text:
            return
        out = Text()
        for line in text.rstrip("\n").split("\n"):
            if line.startswith("(") and ") " in line[:80]:
                pre, _, rest = line.partition(") ")
                out.append(pre + ") ", style="cyan")
                out.append(rest + "\n")
            elif line.startswith("[rayjobs]"):
                out.append(line + "\n", style="bold magenta")
            else:
                out.append(line + "\n")
        out.rstrip()
        self.live.console.print(out, highlight=False, markup=False, soft_wrap=True)

    def update(self, job: Optional[JobView], progress: Progress, changed: bool = False) -> None:
        self.job, self.progress = job, progress
        now = time.monotonic()
        if changed or now >= self.next:
            self.next = now + self.refresh_s
            self.live.update(self.render(), refresh=True)

    def render(self) -> Any:
        from rich.panel import Panel
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        p, job = self.progress, self.job
        status = job.status if job is not None else "?"
        jm = job.meta if job is not None else JobMeta()
        head = Text()
        head.append(f" {status} ", style=STATUS_STYLE.get(status, "bold") + " reverse")
        head.append(f"  {self.job_id}", style="bold")
        if jm.sweep_overrides:
            from rayjobs.contract.ranking import point_label

            head.append(f"  {point_label(list(jm.sweep_overrides))}", style="dim")
        if p.attempt:
            head.append(f"  attempt {p.attempt}")
        if p.cause:
            head.append(f"  {'failed' if status == Status.FAILED else 'last failure'}: {p.cause[:120]}", style="red")
        head.append(f"  {fmt_duration(time.monotonic() - self.started)} watched", style="dim")
        grid = Table.grid(padding=(0, 1))
        grid.add_row(head)
        if p.step is not None or p.total:
            row = Table.grid(padding=(0, 1))
            done = p.step or 0
            if p.total:
                row.add_row(Text(f"step {done}/{p.total}", style="bold"),
                            ProgressBar(total=p.total, completed=min(done, p.total), width=30),
                            Text(f"{100 * done / p.total:.0f}%"),
                            Text(f"ETA {fmt_duration(p.eta_s())}" if status == Status.RUNNING else ""))
            else:
                row.add_row(Text(f"step {done}", style="bold"))
            grid.add_row(row)
        nums = Text()
        for label, _, v in headline(p.last):
            nums.append(f"{label} ", style="dim")
            nums.append(f"{fmt_num(v)}   ", style="bold")
        if p.val:
            nums.append(f"{p.val[0].removeprefix('val-core/')} ", style="dim")
            nums.append(f"{fmt_num(p.val[1])}", style="bold")
            if p.val[2] is not None:
                nums.append(f" @{p.val[2]}", style="dim")
        if nums.plain:
            grid.add_row(nums)
        if p.wandb_url:
            w = Text("W&B ", style="dim")
            w.append(p.wandb_url, style="blue underline")
            grid.add_row(w)
        if status == Status.FAILED and job is not None and job.message:
            grid.add_row(Text(" ".join(str(job.message).split())[:200], style="red"))
        return Panel(grid, border_style=STATUS_STYLE.get(status, "white").replace("bold ", ""), padding=(0, 1))
