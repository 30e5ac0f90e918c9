"""Daily job commands: ``tail``, ``logs``, ``status``, ``list``, ``stop``, ``resume``, ``rerun`` (design §3);
``plot`` and ``compare`` are in :mod:`rayjobs.cli.curves`.

stdout carries data (log lines, JSON, tables, ids); stderr carries chatter. Errors are one line,
exit 2. Heavy imports (ray, rich, matplotlib, requests) happen inside the commands.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Optional

import click

from rayjobs.cli.common import ADDRESS, _exit, _open, _pipe_safe, _say, json_rows
from rayjobs.cli.group import main
from rayjobs.contract.status import TERMINAL, Status
from rayjobs.errors import run_cli

# --------------------------------------------------------------------------- tail / logs
JSON_HELP = ("JSON Lines on stdout instead of the log: one object per verl step line (verl's keys, flat, with "
             "event=step, job, run, attempt, step, total_steps, ts) and per rayjobs event (admitted, attempt_started, "
             "attempt_failed, last_checkpoint, checkpoint_saved; job_ended last, with status and cause). Other log "
             "lines are not printed. ts is UTC, the time the line was read unless it carries a time (ts_source).")


@main.command("tail")
@click.argument("job_id")
@click.option("--plain", is_flag=True, help="Plain lines even on a terminal (no live panel).")
@click.option("--lines", "-n", type=int, default=None, metavar="N",
              help="Of the log written before attaching, print only the last N lines (default: all of it; the last "
                   "1000 on a terminal). With --json: the records from the N-th last step on (default: all).")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@ADDRESS
def tail_cmd(job_id: str, plain: bool, lines: Optional[int], as_json: bool, address: Optional[str]) -> None:
    """Follow a job's log with live RL progress until it ends.

    Exit code: 0 SUCCEEDED, 1 FAILED, 3 STOPPED, 130 detached with Ctrl-C (the job keeps running).
    A job the cluster no longer shows (or a cluster that is gone): the end of its log kept in the
    local record, and its kept final status's exit code.
    """

    def go() -> int:
        from rayjobs.api import Job
        from rayjobs.errors import ClusterUnreachable, NoSuchJob

        try:
            job = Job.find(job_id, address=address)
        except (ClusterUnreachable, NoSuchJob) as e:
            return _kept_log(job_id, e, lines=lines, as_json=as_json, tail=True)
        return job.tail(live=False if plain else None, lines=-1 if lines is None else lines, as_json=as_json)

    _exit(run_cli(_pipe_safe(go)))


@main.command("logs")
@click.argument("job_id")
@click.option("--tail", "-n", "lines", type=int, default=None, metavar="N",
              help="Only the last N lines. With --json: the records from the N-th last step on (the whole log is read).")
@click.option("--follow", "-f", is_flag=True, help="Keep following (same as `rayjobs tail --plain`).")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@ADDRESS
def logs_cmd(job_id: str, lines: Optional[int], follow: bool, as_json: bool, address: Optional[str]) -> None:
    """Print a job's log (plain text, no ANSI codes unless stdout is a terminal)."""

    def go() -> int:
        from rayjobs.api import Job
        from rayjobs.errors import ClusterUnreachable, NoSuchJob

        try:
            job = Job.find(job_id, address=address)
        except (ClusterUnreachable, NoSuchJob) as e:
            return _kept_log(job_id, e, lines=lines, as_json=as_json)
        if follow:
            return job.tail(live=False, lines=-1 if lines is None else lines, as_json=as_json)
        wrote, said = False, []

        def say(msg: str) -> None:
            said.append(msg)
            _say(msg)

        if as_json:
            from rayjobs.views.steplog import dumps

            for rec in job.steps(tail=lines):
                sys.stdout.write(dumps(rec) + "\n")
                wrote = True
        else:
            for text in job.iter_logs(tail=lines, clean=not sys.stdout.isatty(), say=say):
                sys.stdout.write(text)
                wrote = wrote or bool(text)
        sys.stdout.flush()
        if not wrote:
            status = job.status()
            if status not in TERMINAL:
                _say(f"{job.job_id} has no {'step yet' if as_json else 'log yet'} ({status})")
            elif not said and lines != 0:  # it ended: nothing more is coming (what is left was said)
                _say(f"{job.job_id} {status}: its log is empty")
        return 0

    _exit(run_cli(_pipe_safe(go)))


def _kept_log(job_id: str, e: Exception, *, lines: Optional[int], as_json: bool, tail: bool = False) -> int:
    """``logs``/``tail`` of a job its cluster cannot show (unreachable, or it forgot the job): the
    end of its log kept in the local record (the last ``lines`` lines; JSON: its records); ``tail``:
    the exit code of the kept final status. Nothing kept: ``e`` is raised."""
    from rayjobs import api
    from rayjobs.errors import ClusterUnreachable
    from rayjobs.views import logparse, steplog
    from rayjobs.views.jobtail import EXIT_CODES
    from rayjobs.views.localrows import head_down_line

    row = api.recorded_row(job_id, "", gone=True)
    kept = api.kept_log_tail(row["id"])
    if kept is None:
        raise e
    what = f"the end of {row['id']}'s log kept in the local record"
    why = "cluster unreachable" if isinstance(e, ClusterUnreachable) else f"{row['id']} is not on the cluster"
    _say(head_down_line(e, what) or f"{why}: {what}. {e}")
    text = kept.decode("utf-8", "replace")
    if as_json:
        sys.stdout.write("".join(steplog.dumps(r) + "\n" for r in steplog.kept_records(row, text, tail=lines)))
    else:
        text = text if sys.stdout.isatty() else logparse.clean_block(text)
        if lines is not None:
            text = "".join(x + "\n" for x in text.splitlines()[-lines:]) if lines > 0 else ""
        sys.stdout.write(text)
    if not tail:
        return 0
    status = str(row["status"]) if row.get("final") else Status.UNKNOWN
    _say(f"{row['id']} · {status} (kept in the local record)")
    return EXIT_CODES.get(status, 4)


# --------------------------------------------------------------------------- status / list
STATUS_FIELDS = ("status", "experiment", "sweep", "label", "overrides", "priority", "attempt", "failures", "lost", "queue_position",
                 "gpus", "submitted_at", "start_time", "end_time", "step", "total_steps", "checkpoint_step", "metrics", "wandb_url",
                 "run", "resumed_from", "rerun_of", "user", "after", "preempted_by", "redo_steps", "preemptions",
                 "preempting_for", "error", "reaped", "message")


@main.command("status")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object (id, status, experiment, sweep, overrides, priority, attempt, submitted_at, queue_position, ...).")
@ADDRESS
def status_cmd(job_id: str, as_json: bool, address: Optional[str]) -> None:
    """Show one job: status, attempt, progress, latest metrics, W&B run.

    An ended job's final state is kept in the local record; while its cluster cannot be reached (or
    the embedded local head is stopped: a read never starts it), that copy (or what was last seen
    of the job) is shown, marked, exit 0.
    """

    def go() -> int:
        from rayjobs import api
        from rayjobs.errors import ClusterUnreachable, NoSuchJob
        from rayjobs.views.localrows import head_down_line

        try:
            d = _open(address, start=False)  # a read: a stopped embedded head stays stopped
        except ClusterUnreachable as e:
            row = api.recorded_row(job_id, "", gone=True)
            what = f"{row['id']} from the local record, " + \
                ("its final state kept here" if row.get("final") else "what was last seen of it (cluster gone)")
            _say(head_down_line(e, what) or f"cluster unreachable: {what}. {e}")
        else:
            try:
                row = api.Job.find(job_id, dashboard=d).row()
            except NoSuchJob:  # not several: one that the cluster does not know (any more)
                row = api.recorded_row(job_id, d.target.key)
                _say(f"{row['id']} is not on the cluster; showing the local record")
        if as_json:
            click.echo(json.dumps(row, indent=2, default=str))
        else:
            click.echo(_status_text(row))
        return 0

    _exit(run_cli(go))


@main.command("list")
@click.option("--sweep", default=None, metavar="S", help="Only the jobs of sweep S.")
@click.option("--status", "statuses", multiple=True, metavar="S", help="Only jobs in status S (repeat or comma-separate).")
@click.option("--experiment", default=None, metavar="E", help="Only jobs of experiment E.")
@click.option("--json", "as_json", is_flag=True, help="A JSON list of job objects.")
@click.option("--all", "include_all", is_flag=True, help="Include Ray jobs not submitted by rayjobs.")
@click.option("--keep", is_flag=True,
              help="Keep every ended job's final state, log tail and metrics in the local record now (rayjobs down does).")
@ADDRESS
def list_cmd(sweep: Optional[str], statuses: tuple[str, ...], experiment: Optional[str], as_json: bool,
             include_all: bool, keep: bool, address: Optional[str]) -> None:
    """List jobs (oldest first): id, experiment, overrides, status, attempt, GPUs, age, step, score.

    While the cluster cannot be reached, or the embedded local head is stopped (a read never starts
    it): its jobs from the local record at once (STATUS* = the final state kept here; "(cluster
    gone)" = last seen, may have changed), exit 0.
    """

    def go() -> int:
        from rayjobs import api

        rows = api.list_jobs(sweep=sweep, statuses=statuses, experiment=experiment, include_all=include_all,
                             address=address, keep=keep, say=_say)
        if keep:
            _say(f"the local record keeps the final state of {api.kept_ended(rows)} ended job(s) "
                 f"({api.record_dir('ID')})")
        if as_json:
            click.echo(json_rows(rows))
        else:
            _table(rows)
        return 0

    _exit(run_cli(go))


def _status_text(row: dict[str, Any]) -> str:
    """``rayjobs status`` for people: ``key: value`` lines, the empty ones left out."""
    from rayjobs.views import jobrows

    lines = [f"id: {row['id']}"]
    for k in STATUS_FIELDS:
        v = row.get(k)
        if v in (None, "", [], {}) or k == "total_steps":
            continue
        if k == "metrics":
            v = "  ".join(f"{mk}={mv:.4g}" for mk, mv in v.items())
        elif k == "overrides":
            v = " ".join(v)
        elif k == "step" and row.get("total_steps"):
            v = f"{v}/{row['total_steps']}"
        elif k == "message":
            v = " ".join(str(v).split())[:300]
        elif k == "reaped":
            v = "; ".join(v)
        elif k == "after":
            v = ", ".join(v)
        elif k == "attempt":
            v = jobrows.attempt_text(row) or v
        elif k in ("failures", "lost"):  # one line per failed (or lost) attempt
            v = "".join(f"\n  {f}" for f in v)
        elif k == "status":
            v = _cells(dict(row, queue_position=None), time.time())[4]  # the position has its line
        lines.append(f"{k}: {v}")
    if row.get("source") == "local":
        lines.append(f"source: the local record (kept {row['kept_at']})" if row.get("kept_at") else
                     f"source: the local record (last seen {row.get('seen_at') or 'at submit'})")
    return "\n".join(lines)


LIST_COLUMNS = ("ID", "SWEEP", "EXPERIMENT", "OVERRIDES", "STATUS", "ATT", "GPUS", "AGE", "STEP", "SCORE")


#: Above this many rows a terminal gets the plain table too: rich lays out 2,000 rows in ~3 s.
RICH_MAX_ROWS = 300
RIGHT = ("ATT", "GPUS", "AGE", "STEP", "SCORE")


def _table(rows: list[dict[str, Any]]) -> None:
    """The human table of ``rayjobs list``: every cell filled ('-' where there is nothing), so
    columns stay aligned for ``awk``; on a terminal (up to :data:`RICH_MAX_ROWS`) a rich table
    whose narrow cells fold, never its headers; else plain aligned columns, fast at any size."""
    if not rows:
        _say("no jobs (submit one with: python -m rayjobs.submit +exp=NAME)")
        return
    now = time.time()
    cells = [[c or "-" for c in _cells(r, now)] for r in rows]
    if sys.stdout.isatty() and len(rows) <= RICH_MAX_ROWS:
        _rich_table(rows, cells)
        return
    widths = [max(len(col), *(len(c[i]) for c in cells)) for i, col in enumerate(LIST_COLUMNS)]
    for line in [list(LIST_COLUMNS), *cells]:
        out = [c.rjust(w) if col in RIGHT else c.ljust(w) for c, w, col in zip(line, widths, LIST_COLUMNS)]
        sys.stdout.write(" ".join(out).rstrip() + "\n")


def _rich_table(rows: list[dict[str, Any]], cells: list[list[str]]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from rayjobs.views.panel import STATUS_STYLE

    t = Table(box=None, header_style="bold", pad_edge=False)
    for col in LIST_COLUMNS:
        t.add_column(col, no_wrap=col in ("ID", "STATUS", "AGE"), min_width=len(col),
                     justify="right" if col in RIGHT else "left")
    for r, row in zip(rows, cells):
        row = [escape(c) for c in row]
        style = STATUS_STYLE.get(r["status"])
        row[4] = f"[{style}]{row[4]}[/]" if style else row[4]
        t.add_row(*row)
    Console().print(t)


def _cells(r: dict[str, Any], now: float) -> list[str]:
    """One row of :data:`LIST_COLUMNS` as text (empty where the job has no value); STATUS as
    :func:`rayjobs.views.jobrows.status_text` writes it."""
    from datetime import datetime

    from rayjobs.views import jobrows
    from rayjobs.views.panel import fmt_num

    status = jobrows.status_text(r)
    try:
        age = jobrows.age(datetime.fromisoformat(r["submitted_at"]).timestamp(), now) if r.get("submitted_at") else ""
    except ValueError:
        age = ""
    step = "" if r.get("step") is None else (f"{r['step']}/{r['total_steps']}" if r.get("total_steps") else str(r["step"]))
    return [r["id"], r.get("sweep") or "", r.get("experiment") or "", r.get("label") or "", status,
            jobrows.attempt_text(r), str(r.get("gpus") or ""), age, step,
            "" if r.get("score") is None else fmt_num(r["score"])]


# --------------------------------------------------------------------------- stop
@main.command("stop")
@click.argument("job_ids", nargs=-1)
@click.option("--sweep", default=None, metavar="S", help="Stop every job of sweep S.")
@click.option("--at-checkpoint", is_flag=True,
              help="Let a running trainer reach its next checkpoint, then stop it (nothing to redo on resume).")
@click.option("--timeout", "timeout_s", type=float, default=None, metavar="SECONDS",
              help="With --at-checkpoint: stop anyway after this long without a new checkpoint [default: 3600].")
@click.option("--wait", "wait_s", type=float, default=90.0, show_default=True, metavar="SECONDS",
              help="How long to wait for the jobs to end (the trainer gets the head's grace period to checkpoint).")
@ADDRESS
def stop_cmd(job_ids: tuple[str, ...], sweep: Optional[str], at_checkpoint: bool, timeout_s: Optional[float],
             wait_s: float, address: Optional[str]) -> None:
    """Stop jobs (idempotent): SIGTERM, a grace period to checkpoint, then Ray's kill.

    Prints "ID STATUS" per job on stdout, and on stderr how many steps since its last checkpoint a
    resume will redo; exit 0 once all are terminal (1 if some are still running). With
    --at-checkpoint a running job stops right after its next checkpoint (exit 0 while it gets there).
    """

    def go() -> int:
        from rayjobs import api
        from rayjobs.errors import ConfigError

        if timeout_s is not None and not at_checkpoint:
            raise ConfigError("--timeout only goes with --at-checkpoint (how long to wait for the next checkpoint)")
        if timeout_s is not None and timeout_s <= 0:
            raise ConfigError(f"--timeout {timeout_s:g}: give a number of seconds > 0")
        status = api.stop_jobs(job_ids, sweep=sweep, wait=wait_s, address=address, say=_say,
                               at_checkpoint=at_checkpoint, timeout=3600.0 if timeout_s is None else timeout_s)
        for i, st in status.items():
            click.echo(f"{i} {st}")
        pending = [i for i, st in status.items() if st not in TERMINAL]
        for i in pending:
            if status[i] == Status.PENDING:
                _say(f"{i} has not started yet: Ray stops it as soon as it starts")
        late = sorted(i for i in pending if status[i] != Status.PENDING)
        if late and at_checkpoint:
            _say(f"stopping at their next checkpoint: {', '.join(late)} (rayjobs status shows when)")
        elif late:
            _say(f"still stopping after {wait_s:.0f} s: {', '.join(late)} (check again with rayjobs status)")
            return 1
        return 0

    _exit(run_cli(go))


@main.command("resume")
@click.argument("job_id")
@ADDRESS
def resume_cmd(job_id: str, address: Optional[str]) -> None:
    """Continue a stopped or failed job from its last checkpoint, as a new attempt of the same run.

    Prints the new job's id (ID-rN) on stdout: the same submit request and code snapshot, queued again.
    """

    def go() -> int:
        from rayjobs import api

        click.echo(api.resume_job(job_id, address=address, say=_say).job_id)
        return 0

    _exit(run_cli(go))


@main.command("rerun")
@click.argument("job_id")
@click.argument("overrides", nargs=-1)
@click.option("--dry-run", is_flag=True, help="Check as a submit does and print the JSON of its dry run; queue nothing.")
@ADDRESS
def rerun_cmd(job_id: str, overrides: tuple[str, ...], dry_run: bool, address: Optional[str]) -> None:
    """Run a job again under a new id: its recorded config with OVERRIDES (key=value, +key=value, ~key),
    and its own code (the snapshot the cluster's queue kept), not the current directory.

    Prints the new job's id on stdout (with --dry-run: the dry run's JSON).
    """

    def go() -> int:
        from rayjobs import api

        job = api.rerun_job(job_id, overrides, address=address, dry_run=dry_run, say=_say)
        if not dry_run:
            click.echo(job.job_id)
        return 0

    _exit(run_cli(go))


# --------------------------------------------------------------------------- plot
