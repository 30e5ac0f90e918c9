"""The wrapper every rayjobs job runs under, on the cluster: ``python3 -m rayjobs.oncluster.runner -- CMD``.

It reads the job's metadata (Ray hands it to the driver in ``RAY_JOB_CONFIG_JSON_ENV_VAR``) and
gives each attempt what it must get right:

* a per-attempt metrics file: verl's ``file`` logger truncates ``$VERL_FILE_LOGGER_PATH`` on
  every start, so attempt N writes ``<run_dir>/metrics.<N>.jsonl`` (N counts earlier attempts of
  the same run, including earlier submissions that resumed it);
* ``rayjobs.max_retries``: a failed attempt is re-run, resuming from the same absolute
  checkpoint dir (verl's ``trainer.resume_mode=auto``);
* signals: SIGTERM/SIGINT from ``ray job stop`` are passed to the trainer, which gets the
  head's stop grace period to save;
* checkpoints (:mod:`rayjobs.oncluster.checkpointwatch`): each complete one is logged, and a
  ``rayjobs stop --at-checkpoint`` request stops the job once the next one is saved;
* the queue (:mod:`rayjobs.door.host`) submitted this Ray job once its GPUs were free;
  while it runs (retries included) the queue keeps its GPUs for it.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import threading
import sys
import time
from pathlib import Path
from typing import Any, Optional

from rayjobs.contract import capacity, paths
from rayjobs.contract.meta import JobMeta
from rayjobs.oncluster import attemptlog, checkpointwatch, failurecause, nodecache, raysession, warmstamps, warmth
from rayjobs.oncluster.checkpointwatch import CheckpointWatch
from rayjobs.oncluster.failurecause import Cause
from rayjobs.shared import JOB_MARK_ENV, STANDBY_GO_ENV, stamp


def job_metadata() -> JobMeta:
    """This job's metadata as submitted, with Ray's own ``job_submission_id`` (none outside a Ray job).

    A job whose metadata names no ``kind`` (not one rayjobs submitted: rayjobs always writes it)
    runs its command as given, without verl's overrides: JobMeta's default kind is for the queue's
    records, all rayjobs'.
    """
    raw = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR", "{}")
    try:
        given = dict(json.loads(raw).get("metadata") or {})
    except (ValueError, AttributeError):
        given = {}
    return JobMeta.from_ray({"kind": "command", **given})


def next_attempt(run_dir: Path) -> int:
    """1 + the number of attempts this run already had (their metrics files)."""
    return 1 + len(paths.metrics_files(str(run_dir)))


def log(msg: str) -> None:
    print(f"[rayjobs] {msg}", flush=True)


def start_dir() -> Optional[str]:
    """The job's working dir by *path* (``$PWD`` as Ray's job supervisor set it, else getcwd)."""
    pwd = os.environ.get("PWD")
    try:
        if pwd and os.path.samefile(pwd, "."):
            return pwd
        return os.getcwd()
    except OSError:
        return pwd or None


def _same_dir(a: str, b: str) -> bool:
    """Same inode? A deleted cwd still stats (its old inode), so a replaced dir compares unequal."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


#: How long a runner waits for its working dir to be back (Ray's unpack is rmtree, then unzip).
UNPACK_WAIT_S = 30.0


def _wait_for_dir(path: str, timeout: float = UNPACK_WAIT_S) -> bool:
    deadline = time.monotonic() + timeout
    while not os.path.isdir(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


#: When this runner started: a stop-at-checkpoint request older than that was for an earlier job.
STARTED_AT = time.time()


_HEAD: list = []  #: the head's Jobs API client, made when a stop is first asked


def head_client() -> Any:
    if not _HEAD:
        from rayjobs.oncluster.headapi import head_jobs

        _HEAD.append(head_jobs().d)
    return _HEAD[0]


def stop_own_job(job_id: str) -> bool:
    """Stop this job through Ray's Jobs API on the head (STOPPED, the head's grace period)."""
    if not job_id:
        return False
    t = time.monotonic()
    try:
        head_client().stop(job_id)
        log(f"Ray's stop asked ({time.monotonic() - t:.2f} s)")
        return True
    except Exception as e:  # noqa: BLE001
        log(f"could not stop this job through Ray ({type(e).__name__}: {e}); stopping its trainer instead")
        return False


def watch_checkpoints(meta: JobMeta, proc: subprocess.Popen, metrics: Optional[Path] = None) -> CheckpointWatch:
    """The attempt's checkpoint watch (:mod:`rayjobs.oncluster.checkpointwatch`), started."""
    job_id = meta.submission_id

    def stop(_reason: str) -> bool:
        # the trainer stops now, not once Ray's stop (an HTTP call, slow on a loaded head) reaches it;
        # Ray's stop makes the job STOPPED and ends whatever else its process tree holds
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        return stop_own_job(job_id)

    run_dir = Path(meta.run_dir) if meta.run_dir else None

    def ready() -> None:
        def build() -> None:
            try:
                head_client()
            except Exception:  # noqa: BLE001 (the stop says so, if it fails too)
                pass

        # off the watch's thread: finding the head's dashboard can take seconds on a busy node, and
        # the watch must keep looking for the checkpoint the stop waits for meanwhile
        threading.Thread(target=build, name="rayjobs-head-client", daemon=True).start()

    return CheckpointWatch(meta.checkpoint_dir or None, run_dir, job_id, log, stop, STARTED_AT, ready, metrics).start()


class Attempt:
    """One run of the trainer: its exit code, whether this job was being stopped, and whether
    Ray's stop was asked but has not reached this runner yet (it must not exit before: the job
    would read FAILED or SUCCEEDED, not STOPPED)."""

    def __init__(self, code: int, stopped: bool, ray_stop_due: bool = False) -> None:
        self.code, self.stopped, self.ray_stop_due = code, stopped, ray_stop_due


#: How long a runner whose checkpoint watch asked Ray's stop waits for it (Ray's signal ends it).
RAY_STOP_WAIT_S = 30.0


def await_ray_stop(max_s: float = RAY_STOP_WAIT_S) -> None:
    """Wait for Ray's stop to end this process (SIGTERM, its default action); bounded."""
    deadline = time.monotonic() + max_s
    while time.monotonic() < deadline:
        time.sleep(0.05)
    log(f"Ray's stop did not reach this runner within {max_s:g} s; it exits on its own")


def run_attempt(cmd: list[str], env: dict[str, str], cwd: Optional[str] = None,
                meta: Optional[JobMeta] = None) -> Attempt:
    """Run one attempt in ``cwd`` (a path): its exit code and whether a stop reached this runner.

    The trainer starts in the working dir named by path, not in the directory this process
    inherited: while a runner waits in the queue, Ray may unpack the job's working_dir package
    again (seen with two raylets sharing one host's session dir), leaving the runner in a
    deleted directory; a trainer started there fails at once (torch's MKL cannot load without a
    working getcwd: "Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so").

    The trainer stays in this process group, so Ray's stop (SIGTERM to the group, SIGKILL after
    the grace period) reaches it even if this wrapper dies first; a signal sent to the wrapper
    alone is forwarded. A trainer killed while no stop reached this runner (the OOM killer, a
    kill by hand) is a failure, not a stop: it is retried.
    """
    if cwd is not None and not os.path.isdir(cwd):
        log(f"the job's working dir {cwd} is gone; waiting up to {UNPACK_WAIT_S:g} s for it to be unpacked again")
        if not _wait_for_dir(cwd):
            log(f"WARNING: {cwd} did not come back; the trainer starts in the directory this runner inherited")
            cwd = None
    if cwd is not None and not _same_dir(cwd, "."):
        log(f"the job's working dir {cwd} was unpacked again while this job waited; the trainer starts in the new one")
    proc = subprocess.Popen(cmd, env=env, cwd=cwd)
    log(f"trainer started (pid {proc.pid}) at {stamp()}")   # a start-up mark (docs/gpu-e2e.md §10)
    metrics = Path(env["VERL_FILE_LOGGER_PATH"]) if env.get("VERL_FILE_LOGGER_PATH") else None
    watch = watch_checkpoints(meta, proc, metrics) if meta is not None else None
    stopped: list[int] = []

    def forward(signum: int, _frame: Any) -> None:
        stopped.append(signum)
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = proc.wait()
    finally:
        if watch is not None:
            watch.close(wait_s=60.0 if watch.fired else 5.0)  # a fired stop: its call to Ray finishes first
        for s, h in old.items():
            signal.signal(s, h)
    fired = watch is not None and watch.fired
    return Attempt(code, bool(stopped) or fired, fired and bool(watch.through_ray) and not stopped)  # type: ignore[union-attr]


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("usage: python3 -m rayjobs.oncluster.runner -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    meta = job_metadata()
    _SESSION.append(raysession.SessionWatch.of_this_process())  # its raylet, found while it runs
    go = os.environ.pop(STANDBY_GO_ENV, None)
    base_env = dict(os.environ)  # the trainer's environment: as Ray gave it
    # The queue (rayjobs.door.host) submits a job once its GPUs are free, or pre-starts
    # the next one (rayjobs.oncluster.standby), which holds here until the queue admits it.
    if go:
        admission = hold_for_admission(Path(go))
        if admission is None:
            if not session_alive():
                log(f"this job's Ray session is gone (the head's Ray restarted): not starting here; {REQUEUED}")
                return SESSION_GONE
            log(f"not admitted within {STANDBY_MAX_S:g} s of being pre-started; the queue starts it again when it fits")
            return STANDBY_EXPIRED
        meta = meta.merged(admission)  # the queue's admission keys, as its go file carries them
    if meta.admitted_at:
        note = f" ({meta.admission_note})" if meta.admission_note else ""
        # two times: the queue's decision, and this runner's own start (Ray's job start in between)
        log(f"admitted after {meta.waited_s or '?'} s at {meta.admitted_at}, running from {stamp()}: "
            f"{describe_demand(meta)}{note}")
    code = run_attempts(argv, meta, base_env, start_dir())
    keep_log(meta)
    return code


def keep_log(meta: JobMeta) -> None:
    """The end of this job's log, kept on the storage root: it outlives the head's Ray session."""
    attemptlog.keep_tail(attemptlog.own_log(), meta.run_dir or None, meta.submission_id)


#: A pre-started runner gives up after this long (the queue then starts the job cold at admission).
STANDBY_MAX_S = float(os.environ.get("RAYJOBS_STANDBY_MAX_S", 7 * 86400))
STANDBY_EXPIRED = 75  #: its exit code then (EX_TEMPFAIL)
SESSION_GONE = 76  #: a runner whose Ray session died under it (nobody reads it: its job is gone)
REQUEUED = "the queue runs this job again as a new Ray job"
GO_POLL_S = 0.01
SESSION_CHECK_S = 2.0  #: how often a held runner asks whether its Ray session still lives
_SESSION: list[raysession.SessionWatch] = []  #: this runner's Ray session (set by main)


def session_alive() -> bool:
    """Does the Ray session this runner started in still live (:mod:`rayjobs.oncluster.raysession`)?
    True when it cannot be told (no watch: the runner's functions called on their own)."""
    return all(w.alive() for w in _SESSION)


def hold_for_admission(go: Path, max_s: float = STANDBY_MAX_S) -> Optional[dict[str, Any]]:
    """Wait (bounded by ``max_s``) for the queue's go file; the admission it carries, or None
    (also at once when this runner's Ray session died: :mod:`rayjobs.oncluster.raysession`).

    A ``stat`` every 10 ms on the head's local disk: nothing heavier runs while the job waits
    (no Ray import, no connection), and the trainer starts within ~10 ms of the admission. The
    go file's name is this pre-start's own (the queue makes a new one for each), so a runner left
    from a Ray session that died never takes the admission of its job's next Ray job.
    """
    deadline, path = time.monotonic() + max_s, str(go)
    next_check = time.monotonic() + SESSION_CHECK_S
    while time.monotonic() < deadline:
        if not os.path.exists(path):  # the cheapest check (~2% of a core at 10 ms with pathlib's read)
            if time.monotonic() >= next_check:
                if not session_alive():
                    return None
                next_check = time.monotonic() + SESSION_CHECK_S
            time.sleep(GO_POLL_S)
            continue
        try:
            admission = json.loads(go.read_text() or "{}")
        except ValueError:  # not possible with its atomic write; read as "admitted, no details"
            admission = {}
        go.unlink(missing_ok=True)
        return {k: str(v) for k, v in admission.items()}
    return None


def describe_demand(meta: JobMeta) -> str:
    """``2 groups of 1 GPU + 3 CPU, each on one node`` (or ``no GPUs``), from the job's metadata."""
    return capacity.describe(list(meta.gpu_groups)) if meta.gpu_groups else "no GPUs"


#: However often the budget is reset by new checkpoints, a job has at most this many attempts.
MAX_ATTEMPTS = int(os.environ.get("RAYJOBS_MAX_ATTEMPTS", 100))


def run_attempts(argv: list[str], meta: JobMeta, base_env: dict[str, str],
                 workdir: Optional[str] = None) -> int:
    """The attempts of one job, each started in ``workdir``; the exit code to report.

    An attempt counts as a success only if it trained or finished its steps
    (:func:`judge`). A failed one is retried when its cause can be helped by a new attempt
    (:mod:`rayjobs.oncluster.failurecause`) and ``rayjobs.max_retries`` allows; an attempt that
    saved a new checkpoint resets that budget (it made progress: the next failure is a new one).
    Each failure's cause is logged in one line (``attempt N failed: <cause>``), the views show it.
    """
    retries = meta.max_retries
    run_dir = Path(meta.run_dir) if meta.run_dir else None
    try:
        argv = resolve_latest(argv)
    except LookupError as e:
        return fail(Cause("config error", False, str(e)), "not retried: a new attempt would fail the same way")
    used, driver_log = 0, attemptlog.own_log()
    for n in range(1, MAX_ATTEMPTS + 1):
        env, cmd = attempt_env(argv, meta, base_env, run_dir, used, retries)
        start_ckpt, log_start, started = checkpoint_before(meta), attemptlog.size(driver_log), time.monotonic()
        att = run_attempt(cmd, env, workdir, meta)
        log(f"attempt finished with exit code {att.code} after {time.monotonic() - started:.1f} s at {stamp()}")
        if att.stopped:
            if att.ray_stop_due:
                keep_log(meta)  # Ray's stop ends this process
                await_ray_stop()
            return exit_code(att.code)
        metrics = Path(env["VERL_FILE_LOGGER_PATH"]) if "VERL_FILE_LOGGER_PATH" in env else None
        cause = judge(att.code, attemptlog.read_attempt(driver_log, log_start, metrics), start_ckpt, argv)
        if cause is None:
            return 0
        log(f"attempt {env.get('RAYJOBS_ATTEMPT', n)} failed: {cause.line()}")
        if not cause.retry:
            return fail(cause, "not retried: a new attempt would fail the same way")
        saved = checkpointwatch.saved_step(meta.checkpoint_dir or None)
        if saved is not None and saved != start_ckpt and used:
            log(f"new checkpoint (step {saved}) since the last failure: the retry budget starts again ({retries})")
            used = 0
        if used >= retries:
            return fail(cause, f"no retry left (rayjobs.max_retries={retries})")
        if not session_alive():
            # the head's Ray died under this attempt: a retry here would train outside any Ray job
            log(f"not retried here: this job's Ray session is gone (the head's Ray restarted); {REQUEUED}")
            return SESSION_GONE
        used += 1
        reap_before_retry(meta.submission_id)
        log(f"retrying ({used}/{retries}); verl resumes from the checkpoint dir (resume_mode=auto)")
    return fail(Cause("error", False, f"{MAX_ATTEMPTS} attempts"), "RAYJOBS_MAX_ATTEMPTS reached")


#: ``trainer.resume_from_path=<checkpoint dir>/global_step_latest``: the runner puts the step of the
#: last complete checkpoint there when the job starts (verl wants a concrete ``global_step_N``; an
#: evaluation queued behind a training run cannot know it at submit time).
LATEST = "global_step_latest"


def resolve_latest(argv: list[str]) -> list[str]:
    """``argv`` with ``.../global_step_latest`` made the last complete checkpoint's folder.

    Raises:
        LookupError: that checkpoint dir has no complete checkpoint (one line).
    """
    out = []
    for a in argv:
        key, sep, value = a.partition("=")
        value = value.strip("'\"")
        if sep and key.lstrip("+~").endswith("resume_from_path") and value.rstrip("/").endswith("/" + LATEST):
            ckpt_dir = value.rstrip("/")[: -len(LATEST) - 1]
            step = checkpointwatch.saved_step(ckpt_dir)
            if step is None:
                raise LookupError(f"{key.lstrip('+~')}={value}: no complete checkpoint in {ckpt_dir} "
                                  f"(no {checkpointwatch.TRACKER})")
            a = f"{key}={ckpt_dir}/global_step_{step}"
            log(f"{LATEST} is step {step}: {a}")
        out.append(a)
    return out


def attempt_env(argv: list[str], meta: JobMeta, base_env: dict[str, str], run_dir: Optional[Path],
                used: int, retries: int) -> tuple[dict[str, str], list[str]]:
    """The environment and command of the next attempt (its own metrics file, the job's mark)."""
    env, cmd = dict(base_env), list(argv)
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        attempt = next_attempt(run_dir)
        env["VERL_FILE_LOGGER_PATH"] = str(paths.metrics_file(run_dir, attempt))
        # Claimed now, so an attempt that dies before verl's logger starts still counts.
        Path(env["VERL_FILE_LOGGER_PATH"]).touch()
        env["RAYJOBS_ATTEMPT"] = str(attempt)
        left = retries - used  # the run's attempts count as `status` counts them; this says what is left
        # its own time stamp: `tail --json` orders the attempt's event by it, not by when it was read
        log(f"attempt {attempt} of run {meta.run or '?'} at {stamp()} ({left} retr{'y' if left == 1 else 'ies'} "
            f"left; metrics: {env['VERL_FILE_LOGGER_PATH']})")
    job_id = meta.submission_id
    if job_id:
        env[JOB_MARK_ENV] = job_id
    caches = nodecache.node_cache_env(base_env, argv)
    env.update(caches)
    env.update(warmstamps.driver_env(base_env))
    warm = warmth.key_of(shlex.join(argv), verl=meta.kind == "verl", warm=not warmth.opted_out(meta.extra))
    if warm:  # the job's warm-engine key (issue 50): what its rollout may attach to, or keep
        env[warmth.KEY_ENV] = warm
    if caches:
        log(f"node cache {env.get(nodecache.NODE_CACHE_ENV, nodecache.NODE_CACHE_DEFAULT)}: "
            f"{', '.join(var if value else f'{var}=' for var, value in caches.items())}")
    if meta.kind == "verl":
        # verl's actors (its file logger in TaskRunner, vLLM in the rollout workers) get their
        # environment from the runtime_env verl passes to ray.init, not from this driver's.
        renv = "++ray_kwargs.ray_init.runtime_env.env_vars"
        if run_dir is not None:
            cmd.append(f"{renv}.VERL_FILE_LOGGER_PATH='{env['VERL_FILE_LOGGER_PATH']}'")
        if job_id:
            cmd.append(f"{renv}.{JOB_MARK_ENV}='{job_id}'")
        cmd += [f"{renv}.{var}='{path}'" for var, path in caches.items()]
        stamps = warmstamps.actor_overrides(base_env, argv)  # RAYJOBS_STAMPS=1: start-up stamps (issue 50)
        if stamps:
            log("start-up stamps: " + ", ".join(a.partition("=")[0].rpartition(".")[2] for a in stamps))
            cmd += stamps
    return env, cmd


def reap_before_retry(job_id: str) -> None:
    """End what the failed attempt left on the nodes (an orphaned engine holding GPU memory)
    before the next one starts on the same GPUs (:mod:`rayjobs.oncluster.reaper`)."""
    from rayjobs.oncluster import reaper

    if not job_id or not reaper.enabled():
        return
    try:
        lines = reaper.reap_job(job_id)
    except Exception as e:  # noqa: BLE001 (the retry goes on; the queue reaps again at the job's end)
        lines = [f"reaping failed: {type(e).__name__}: {' '.join(str(e).split())[:200]}"]
    for line in lines:
        log(f"ended before the next attempt: {line}")


def checkpoint_before(meta: JobMeta) -> Optional[int]:
    """The step an attempt resumes from; a half-written newer save is moved aside first."""
    for moved in checkpointwatch.set_aside_incomplete(meta.checkpoint_dir or None):
        log(f"a checkpoint save was cut off: moved {moved} (the tracker names the last complete one)")
    return checkpointwatch.saved_step(meta.checkpoint_dir or None)


def judge(code: int, out: attemptlog.AttemptLog, start_ckpt: Optional[int], argv: list[str]) -> Optional[Cause]:
    """None if the attempt succeeded; else why it failed.

    Exit 0 is a success unless the trainer resumed from a checkpoint and exited without a step,
    short of its total (verl-project/verl#7401, PR #5725: at an epoch boundary verl does exactly
    that). Only a resume: a first attempt without a step is a run that trains none on purpose
    (``trainer.val_only=true``, an evaluation).
    """
    if code == 0:
        at = max(start_ckpt or 0, out.last_step or 0)
        trained = out.last_step is not None and out.last_step > (start_ckpt or 0)
        val_only = flag(argv, "trainer.val_only")  # verl validated the loaded checkpoint and returned
        if start_ckpt and out.total_steps is not None and at < out.total_steps and not trained and not val_only:
            return failurecause.no_progress(at, out.total_steps)
        return None
    # verl 0.9.1's reward.custom_reward_function.path, or the older top-level key
    rewards = [a.split("=", 1)[1].strip("'\"") for a in argv
               if "=" in a and a.split("=", 1)[0].lstrip("+~").endswith("custom_reward_function.path")]
    return failurecause.classify(code, out.tail, reward_files=rewards)


def flag(argv: list[str], key: str) -> bool:
    """Is boolean ``key`` true on verl's command line (its last value, as Hydra takes it)?"""
    values = [a.partition("=")[2].strip("'\"").lower() for a in argv if a.partition("=")[0].lstrip("+") == key]
    return bool(values) and values[-1] in ("true", "yes", "on", "1")


def fail(cause: Cause, why: str) -> int:
    """Log the job's final cause (the last line of its log, which Ray's job message quotes) -> 1."""
    log(f"job failed: {cause.line()} ({why})")
    return 1


def exit_code(code: int) -> int:
    return 0 if code == 0 else (code if code > 0 else 128 - code)


if __name__ == "__main__":
    sys.exit(main())
