"""Daily job commands: ``tail``, ``logs``, ``status``, ``list``, ``stop``, ``plot`` (design §3).

stdout carries data (log lines, JSON, tables, ids); stderr carries chatter. Errors are one line,
exit 2. Heavy imports (ray, rich, matplotlib, requests) happen inside the commands.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Optional

import click

from rayjobs.cli.group import main
from rayjobs.errors import run_cli
from rayjobs.shared import TERMINAL

ADDRESS = click.option("--address", default=None, metavar="URL",
                       help="Ray dashboard address (default: RAY_API_SERVER_ADDRESS, RAY_ADDRESS, the connected cluster, or the embedded local one).")


def _say(msg: str) -> None:
    click.echo(f"rayjobs: {msg}", err=True)


def _open(address: Optional[str]) -> Any:
    """The :class:`~rayjobs.client.dashboard.Dashboard` for ``address`` (the settings' if None)."""
    from rayjobs.client.connection import connect

    return connect(address)


def _exit(code: int) -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    sys.exit(code)


def _pipe_safe(fn: Any) -> Any:
    """``rayjobs tail ID | head``: a closed stdout ends the command quietly (exit 0)."""
    import os

    def go() -> int:
        try:
            return fn()
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes at exit
            return 0

    return go


# --------------------------------------------------------------------------- tail / logs
@main.command("tail")
@click.argument("job_id")
@click.option("--plain", is_flag=True, help="Plain lines even on a terminal (no live panel).")
@click.option("--lines", "-n", type=int, default=None, metavar="N",
              help="Of the log written before attaching, print only the last N lines (default: all of it; the last 1000 on a terminal).")
@ADDRESS
def tail_cmd(job_id: str, plain: bool, lines: Optional[int], address: Optional[str]) -> None:
    """Follow a job's log with live RL progress until it ends.

    Exit code: 0 SUCCEEDED, 1 FAILED, 3 STOPPED, 130 detached with Ctrl-C (the job keeps running).
    """

    def go() -> int:
        from rayjobs.views import jobtail

        d = _open(address)
        return jobtail.tail(d, d.resolve_id(job_id), live=False if plain else None, lines=-1 if lines is None else lines)

    _exit(run_cli(_pipe_safe(go)))


@main.command("logs")
@click.argument("job_id")
@click.option("--tail", "-n", "lines", type=int, default=None, metavar="N", help="Only the last N lines.")
@click.option("--follow", "-f", is_flag=True, help="Keep following (same as `rayjobs tail --plain`).")
@ADDRESS
def logs_cmd(job_id: str, lines: Optional[int], follow: bool, address: Optional[str]) -> None:
    """Print a job's log (plain text, no ANSI codes unless stdout is a terminal)."""

    def go() -> int:
        from rayjobs.views import logparse
        from rayjobs.views import jobtail as fol
        from rayjobs.client.dashboard import DashboardDown

        d = _open(address)
        full = d.resolve_id(job_id)
        if follow:
            return fol.tail(d, full, live=False)
        raw = sys.stdout.isatty()
        info = d.info(full)
        node = getattr(info, "driver_node_id", None)
        if not node:
            _say(f"{full} is {info.status}: it has no log yet")
            return 0
        out = sys.stdout
        split = logparse.LineSplitter()
        try:
            for chunk in d.iter_log(full, node, lines if lines is not None else -1):
                if raw:
                    out.buffer.write(chunk)
                else:
                    out.write(logparse.clean_block(split.feed_text(chunk)))
            out.write("".join(logparse.clean(x) + "\n" for x in split.flush()))
        except DashboardDown:
            text = d.logs(full)  # the Jobs API reads the same file another way
            if lines is not None:
                text = "\n".join(text.splitlines()[-lines:]) + "\n" if lines > 0 else ""
            out.write(text if raw else logparse.clean_block(text))
        out.flush()
        return 0

    _exit(run_cli(_pipe_safe(go)))


# --------------------------------------------------------------------------- status / list
STATUS_FIELDS = ("status", "experiment", "sweep", "label", "overrides", "priority", "attempt", "queue_position",
                 "gpus", "submitted_at", "start_time", "end_time", "step", "total_steps", "metrics", "wandb_url",
                 "run", "error", "message")


@main.command("status")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object (id, status, experiment, sweep, overrides, priority, attempt, submitted_at, queue_position, ...).")
@ADDRESS
def status_cmd(job_id: str, as_json: bool, address: Optional[str]) -> None:
    """Show one job: status, attempt, progress, latest metrics, W&B run."""

    def go() -> int:
        from rayjobs.errors import NoSuchJob
        from rayjobs.views import jobrows, queuestatus

        d = _open(address)
        try:
            full = d.resolve_id(job_id)
        except NoSuchJob:  # not several: one that the cluster does not know (any more)
            row = _from_record(job_id, d.target.key)
        else:
            info = d.info(full)
            over = queuestatus.overlay(d, [info]).get(full)
            row = jobrows.add_progress(jobrows.base_row(info, over), info, d, lines=2000, head_scan=True)
            if row["attempt"] is None:
                row["attempt"] = 0 if row["status"] in ("PENDING", "QUEUED") else 1
        if as_json:
            click.echo(json.dumps(row, indent=2, default=str))
            return 0
        click.echo(f"id: {row['id']}")
        for k in STATUS_FIELDS:
            v = row.get(k)
            if v in (None, "", [], {}):
                continue
            if k == "metrics":
                v = "  ".join(f"{mk}={mv:.4g}" for mk, mv in v.items())
            elif k == "overrides":
                v = " ".join(v)
            elif k == "step" and row.get("total_steps"):
                v = f"{v}/{row['total_steps']}"
            elif k == "total_steps":
                continue
            elif k == "message":
                v = " ".join(str(v).split())[:300]
            click.echo(f"{k}: {v}")
        return 0

    _exit(run_cli(go))


@main.command("list")
@click.option("--sweep", default=None, metavar="S", help="Only the jobs of sweep S.")
@click.option("--status", "statuses", multiple=True, metavar="S", help="Only jobs in status S (repeat or comma-separate).")
@click.option("--experiment", default=None, metavar="E", help="Only jobs of experiment E.")
@click.option("--json", "as_json", is_flag=True, help="A JSON list of job objects.")
@click.option("--all", "include_all", is_flag=True, help="Include Ray jobs not submitted by rayjobs.")
@ADDRESS
def list_cmd(sweep: Optional[str], statuses: tuple[str, ...], experiment: Optional[str], as_json: bool,
             include_all: bool, address: Optional[str]) -> None:
    """List jobs (oldest first): id, experiment, overrides, status, attempt, GPUs, age, step, score."""

    def go() -> int:
        from rayjobs.views import jobrows
        from rayjobs.errors import JobNotFound

        wanted = jobrows.parse_statuses(statuses)
        d = _open(address)
        all_jobs = d.list_jobs()
        records = jobrows.missing_records((jobrows.field(j, "submission_id") for j in all_jobs), d.target.key, sweep)
        try:
            chosen = jobrows.select(all_jobs, sweep=sweep, experiment=experiment, include_all=include_all)
        except JobNotFound:
            if not (sweep and records):
                raise
            chosen = []  # a sweep the cluster has forgotten: its rows come from the local record
        if experiment:
            records = [r for r in records if r["experiment"] == experiment]
        if experiment and not chosen and not records:
            _check_experiment(experiment, all_jobs)
        rows = jobrows.rows(chosen, d) + records
        if wanted:
            rows = [r for r in rows if r["status"] in wanted]
        if as_json:
            click.echo(json.dumps(rows, indent=2, default=str))
        else:
            _table(rows)
        return 0

    _exit(run_cli(go))


def _from_record(job_id: str, cluster: str) -> dict[str, Any]:
    """The local record's row for an id the cluster does not know; JobNotFound if none (or several) match."""
    from rayjobs.views import jobrows
    from rayjobs.submit import ledger
    from rayjobs.errors import JobNotFound

    hits = ledger.lookup(job_id)
    if len(hits) == 1:
        _say(f"{hits[0]['id']} is not on the cluster; showing the local record ({ledger.path()})")
        return jobrows.record_row(hits[0], cluster)
    if len(hits) > 1:
        raise JobNotFound(f"{job_id!r} matches {len(hits)} recorded jobs ({', '.join(h['id'] for h in hits[:4])}...); give more of the id")
    raise JobNotFound(f"no job matches {job_id!r} on the cluster or in the local record; `rayjobs list` shows the ids")


def _check_experiment(name: str, all_jobs: list[Any]) -> None:
    """No job of ``name``: fine if it is a known experiment, else an error with the closest names."""
    from rayjobs.views import jobrows
    from rayjobs.errors import ConfigError, did_you_mean

    names = {jobrows.meta(j).get("experiment", "") for j in all_jobs} - {""}
    try:
        from rayjobs.submit import compose

        names |= set(compose.experiments())
    except Exception:
        pass
    if name not in names:
        raise ConfigError(f"unknown experiment {name!r}{did_you_mean(name, names)}")


LIST_COLUMNS = ("ID", "SWEEP", "EXPERIMENT", "OVERRIDES", "STATUS", "ATT", "GPUS", "AGE", "STEP", "SCORE")


def _table(rows: list[dict[str, Any]]) -> None:
    """The human table of ``rayjobs list``: every cell filled ('-' where there is nothing), so
    columns stay aligned for ``awk`` and a narrow terminal folds cells, never headers."""
    from rich.console import Console
    from rich.table import Table

    from rayjobs.views.panel import STATUS_STYLE

    if not rows:
        _say("no jobs (submit one with: python -m rayjobs.submit +exp=NAME)")
        return
    console = Console(width=None if sys.stdout.isatty() else 250)
    t = Table(box=None, header_style="bold", pad_edge=False)
    for col in LIST_COLUMNS:
        t.add_column(col, no_wrap=col in ("ID", "STATUS", "AGE"), min_width=len(col),
                     justify="right" if col in ("ATT", "GPUS", "AGE", "STEP", "SCORE") else "left")
    now = time.time()
    for r in rows:
        cells = [c or "-" for c in _cells(r, now)]
        style = STATUS_STYLE.get(r["status"])
        cells[4] = f"[{style}]{cells[4]}[/]" if style else cells[4]
        t.add_row(*cells)
    console.print(t)


def _cells(r: dict[str, Any], now: float) -> list[str]:
    """One row of :data:`LIST_COLUMNS` as text (empty where the job has no value)."""
    from datetime import datetime

    from rayjobs.views import jobrows
    from rayjobs.views.panel import fmt_num

    status = r["status"] + (f" #{r['queue_position']}" if r.get("queue_position") is not None else "")
    if r.get("source") == "record":
        status += " (record)"
    try:
        age = jobrows.age(datetime.fromisoformat(r["submitted_at"]).timestamp(), now) if r.get("submitted_at") else ""
    except ValueError:
        age = ""
    step = "" if r.get("step") is None else (f"{r['step']}/{r['total_steps']}" if r.get("total_steps") else str(r["step"]))
    return [r["id"], r.get("sweep") or "", r.get("experiment") or "", r.get("label") or "", status,
            str(r.get("attempt") or ""), str(r.get("gpus") or ""), age, step,
            "" if r.get("score") is None else fmt_num(r["score"])]


# --------------------------------------------------------------------------- stop
@main.command("stop")
@click.argument("job_ids", nargs=-1)
@click.option("--sweep", default=None, metavar="S", help="Stop every job of sweep S.")
@click.option("--wait", "wait_s", type=float, default=90.0, show_default=True, metavar="SECONDS",
              help="How long to wait for the jobs to end (the trainer gets the head's grace period to checkpoint).")
@ADDRESS
def stop_cmd(job_ids: tuple[str, ...], sweep: Optional[str], wait_s: float, address: Optional[str]) -> None:
    """Stop jobs (idempotent): SIGTERM, a grace period to checkpoint, then Ray's kill.

    Prints "ID STATUS" per job on stdout; exit 0 once all are terminal (1 if some are still running).
    """

    def go() -> int:
        from rayjobs.views import jobrows
        from rayjobs.errors import ConfigError

        if not job_ids and not sweep:
            raise ConfigError("name the jobs to stop: rayjobs stop ID... or rayjobs stop --sweep S")
        d = _open(address)
        all_jobs = d.list_jobs()
        ids = [d.resolve_id(j, all_jobs) for j in job_ids]
        if sweep:
            ids += [jobrows.field(j, "submission_id") for j in jobrows.select(all_jobs, sweep=sweep)]
        ids = list(dict.fromkeys(ids))
        status = {jobrows.field(j, "submission_id"): jobrows.status_of(j) for j in all_jobs}
        asked = []
        for i in ids:
            if status.get(i) in TERMINAL:
                _say(f"{i} already {status[i]}")
                continue
            d.stop(i)
            asked.append(i)
        if asked:
            _say(f"asked {len(asked)} job(s) to stop; the trainer gets a grace period to save a checkpoint")
        deadline = time.monotonic() + max(0.0, wait_s)
        pending = set(asked)
        while pending and time.monotonic() < deadline:
            for i in list(pending):
                try:
                    status[i] = str(d.info(i).status)
                except Exception:
                    continue
                if status[i] in TERMINAL:
                    pending.discard(i)
            if pending:
                time.sleep(0.5)
        for i in ids:
            click.echo(f"{i} {status.get(i, '?')}")
        late = [i for i in pending if status.get(i) != "PENDING"]
        for i in pending - set(late):
            _say(f"{i} has not started yet: Ray stops it as soon as it starts")
        if late:
            _say(f"still stopping after {wait_s:.0f} s: {', '.join(sorted(late))} (check again with rayjobs status)")
            return 1
        return 0

    _exit(run_cli(go))


# --------------------------------------------------------------------------- plot
@main.command("plot")
@click.argument("job_ids", nargs=-1)
@click.option("--sweep", default=None, metavar="S", help="Plot every job of sweep S.")
@click.option("--metric", "metric_names", multiple=True, metavar="M", help="Metric to plot (repeatable; default critic/score/mean).")
@click.option("--no-val", is_flag=True, help="Leave out the val-core/* panels.")
@click.option("-o", "--output", default="curves.png", show_default=True, metavar="FILE.png")
@click.option("--json", "as_json", is_flag=True, help="Also print the plotted data as JSON on stdout.")
@ADDRESS
def plot_cmd(job_ids: tuple[str, ...], sweep: Optional[str], metric_names: tuple[str, ...], no_val: bool,
             output: str, as_json: bool, address: Optional[str]) -> None:
    """One PNG: a curve per job over steps (legend: sweep overrides), plus val-core metrics."""

    def go() -> int:
        from rayjobs.views import jobrows
        from rayjobs.views import plot
        from rayjobs.errors import ConfigError

        if not job_ids and not sweep:
            raise ConfigError("name the jobs to plot: rayjobs plot ID... or rayjobs plot --sweep S")
        if not output.lower().endswith(".png"):
            raise ConfigError(f"-o {output}: give a .png file name")
        d = _open(address)
        all_jobs = d.list_jobs()
        by_id = {jobrows.field(j, "submission_id"): j for j in all_jobs}
        chosen = [by_id[d.resolve_id(j, all_jobs)] for j in job_ids]
        if sweep:
            chosen += sorted(jobrows.select(all_jobs, sweep=sweep), key=jobrows.order)
        chosen = list({jobrows.field(j, "submission_id"): j for j in chosen}.values())
        data = plot.collect(d, chosen, list(metric_names) or None, val=not no_val)
        title = f"sweep {sweep}" if sweep else None
        plot.render(data, output, title=title)
        if as_json:
            click.echo(json.dumps(data))
        else:
            click.echo(output)
        _say(f"wrote {output} ({len(chosen)} job(s): {', '.join(data['metrics'])})")
        empty = [f"{j['id']} ({j.get('status') or '?'})" for j in data["jobs"] if not j.get("steps")]
        if empty:
            _say(f"nothing logged by: {', '.join(empty)}")
        return 0

    _exit(run_cli(go))
