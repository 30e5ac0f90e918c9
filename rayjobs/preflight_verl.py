"""verl's own validation, run where verl imports: a warm helper process on the client, or the cluster.

``import verl`` pulls in torch, tensordict, transformers and datasets (6-11 s on a 2-core laptop),
far over the one-second budget of a submit. So the client never imports verl itself: the first
submit that needs it starts a helper (``python -m rayjobs.preflight_verl serve SOCKET``) which
imports verl once and then answers validation requests on a private unix socket in
``/tmp/rayjobs-<uid>/`` (a 0700 dir, shared by every ``$RAYJOBS_HOME`` of one user); later submits get an answer in ~0.1 s per distinct
config. The helper exits by itself after ``$RAYJOBS_PREFLIGHT_IDLE_S`` (900 s) without requests,
when its socket is removed or replaced, or when its code or verl changes (the socket name is keyed
by the interpreter, the verl version and this file).

Per config it runs exactly what verl 0.9.1's ``main()`` runs in the driver before ``ray.init``
(``validate_config`` with ``need_reference_policy``/``need_critic``), plus
``omega_conf_to_dataclass`` of the rollout config, which catches what otherwise only fails in the
rollout workers (``mode=sync``, EP/TP/PP rules). The critic's ``HFModelConfig`` loads the model's
HF config and tokenizer: a local directory that exists here is used as is; a hub id or a path that
only exists on the cluster is replaced by a tiny stub model (config.json + a 64-token tokenizer, no
weights), so the batch-size rules are still checked offline and the model itself is not.

On the cluster (``python -m rayjobs.preflight_verl check -- OVERRIDES``) the same validation runs
on the verl overrides of a job, plus the checks of :mod:`rayjobs.preflight` that need the
cluster's files and environment (data files, model dirs, reward per data_source, secrets).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import io
import json
import os
import re
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Optional

#: What ``import verl`` + validation needs beyond rayjobs' own dependencies.
REQUIRED = ("torch", "tensordict", "transformers", "datasets", "codetiming")
#: The pip line that makes verl's validation available on a laptop (CPU torch, ~1.7 GB).
INSTALL_HINT = ("pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && "
                "pip install 'tensordict>=0.8,<=0.10,!=0.9.0' 'transformers>=5.5.3,<5.11,!=5.6.0' codetiming datasets")
IDLE_ENV = "RAYJOBS_PREFLIGHT_IDLE_S"
MODE_ENV = "RAYJOBS_PREFLIGHT_VERL"  #: auto (helper process, default) | inprocess | off


def missing_modules() -> list[str]:
    """The modules verl's validation needs that are not installed here (no import, fast)."""
    return [m for m in REQUIRED if importlib.util.find_spec(m) is None]


def verl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("verl")
    except PackageNotFoundError:
        return "none"


# =========================================================================== inside the verl process
def stub_model(root: Path) -> str:
    """A tiny local HF model dir (config.json with one architecture + tokenizer, no weights)."""
    d = root / "stub-model"
    if (d / "config.json").is_file() and (d / "tokenizer.json").is_file():
        return str(d)
    tmp = root / f"stub-model.{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config

    vocab = {t: i for i, t in enumerate(["<pad>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(60)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(tmp)
    Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, architectures=["Qwen2ForTokenClassification"]).save_pretrained(tmp)
    try:
        os.rename(tmp, d)
    except OSError:  # another process made it first
        pass
    return str(d) if (d / "config.json").is_file() else str(tmp)


def _short(e: BaseException) -> tuple[str, str]:
    """(full_key or "", first meaningful line) of a verl/Hydra exception."""
    text = str(e)
    key = ""
    m = re.search(r"full_key:\s*(\S+)", text)
    if m:
        key = m.group(1)
    name = type(e).__name__
    inner = re.search(r"\n\s*(\w+(?:Error|Exception))\((.*)\)\s*(?:\n|$)", text, re.S)
    if inner:  # Hydra's InstantiationException wraps verl's own error: show that one
        name, text = inner.group(1), inner.group(2).strip().strip("'\"")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("full_key")]
    msg = lines[0] if lines else name
    return key, f"{name}: {msg}"[:400]


def validate_one(cfg: dict, stub_dir: str) -> list[dict]:
    """verl's checks on one resolved verl config (a plain dict). Returns problems as dicts."""
    from omegaconf import OmegaConf

    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    ver = verl_version()
    conf = OmegaConf.create(cfg)
    problems: list[dict] = []
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            use_critic, use_ref = bool(need_critic(conf)), bool(need_reference_policy(conf))
        except Exception as e:  # e.g. adv_estimator missing
            key, msg = _short(e)
            return [{"key": key or "algorithm", "rule": f"verl {ver} need_critic/need_reference_policy failed: {msg}"}]
        if use_critic:
            model = conf.critic.model
            for k in ("path", "tokenizer_path", "hf_config_path"):
                v = model.get(k)
                if v and not os.path.isdir(str(v)):
                    model[k] = stub_dir  # hub id or a path that only exists on the cluster
        try:
            validate_config(conf, use_reference_policy=use_ref, use_critic=use_critic)
        except Exception as e:
            key, msg = _short(e)
            problems.append({"key": key or "(config)", "rule": f"verl {ver} validate_config rejected it: {msg}"})
        try:
            omega_conf_to_dataclass(conf.actor_rollout_ref.rollout)
        except Exception as e:
            key, msg = _short(e)
            problems.append({"key": key or "actor_rollout_ref.rollout",
                             "rule": f"verl {ver} RolloutConfig (checked in the rollout workers, on the GPUs) rejects it: {msg}"})
    return problems


_STUB = ""


def _worker_init(stub: str) -> None:
    global _STUB
    _STUB = stub
    with contextlib.suppress(Exception):  # Linux: die with the helper, even if it is SIGKILLed
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def _worker_validate(cfg: dict) -> list[dict]:
    return validate_one(cfg, _STUB)


class Validator:
    """Validates configs with a cache (resubmits repeat), in parallel for sweeps (forked workers)."""

    def __init__(self, root: Path, workers: int = 0):
        import verl  # noqa: F401  (the expensive part, once)
        from verl.trainer.ppo.utils import need_critic  # noqa: F401
        from verl.utils.config import validate_config  # noqa: F401

        self.stub = stub_model(root)
        self.cache: dict[str, list[dict]] = {}
        self.pool = None
        if workers > 1:
            import concurrent.futures
            import multiprocessing

            # forked after the imports: the workers share the imported verl (copy-on-write)
            self.pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=workers, mp_context=multiprocessing.get_context("fork"),
                initializer=_worker_init, initargs=(self.stub,))

    def __call__(self, cfg: dict) -> list[dict]:
        return self.many([cfg])[0]

    def many(self, cfgs: list[dict]) -> list[list[dict]]:
        keys = [hashlib.sha1(json.dumps(c, sort_keys=True, default=str).encode()).hexdigest() for c in cfgs]
        todo = {k: c for k, c in zip(keys, cfgs) if k not in self.cache}
        if len(self.cache) + len(todo) > 1024:
            self.cache.clear()
        if self.pool is not None and len(todo) >= 3:
            results = list(self.pool.map(_worker_validate, todo.values()))
        else:
            results = [validate_one(c, self.stub) for c in todo.values()]
        self.cache.update(zip(todo.keys(), results))
        return [self.cache[k] for k in keys]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)


# =========================================================================== the helper process
def state_dir() -> Path:
    """A private per-user dir shared by every ``$RAYJOBS_HOME`` (one helper per install, not per home)."""
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp") / f"rayjobs-{os.getuid()}"
    try:
        base.mkdir(mode=0o700, exist_ok=True)
        st = base.stat()
        if st.st_uid == os.getuid() and not st.st_mode & 0o077:
            return base
    except OSError:
        pass
    from rayjobs import settings

    return settings.home() / "preflight"


def _exe_key() -> str:
    return hashlib.sha1(sys.executable.encode()).hexdigest()[:6]


def socket_path() -> Path:
    """Keyed by interpreter + verl version + this file, so a changed install gets a fresh helper."""
    me = Path(__file__)
    st = me.stat()
    key = hashlib.sha1(f"{me}|{verl_version()}|{st.st_mtime_ns}|{st.st_size}".encode()).hexdigest()[:8]
    return state_dir() / f"verl-{_exe_key()}-{key}.sock"


def serve(path: Path) -> None:
    """The helper's main loop: import verl, then answer one request per connection."""
    os.umask(0o077)
    path.parent.mkdir(parents=True, exist_ok=True)
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # run the cleanup below (workers, socket)
    validator = Validator(state_dir(), workers=min(4, os.cpu_count() or 1))
    try:
        _serve_loop(path, validator)
    finally:
        validator.close()


def _serve_loop(path: Path, validator: Validator) -> None:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    srv.bind(str(path))
    srv.listen(16)
    srv.settimeout(5.0)
    ino = path.stat().st_ino
    (path.with_suffix(".pid")).write_text(str(os.getpid()))
    idle = float(os.environ.get(IDLE_ENV, "900"))
    last = time.monotonic()
    while True:
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            try:
                gone = path.stat().st_ino != ino
            except OSError:
                gone = True
            if gone or time.monotonic() - last > idle:
                break
            continue
        last = time.monotonic()
        with conn:
            try:
                conn.settimeout(60)
                req = json.loads(_recv_line(conn))
                if req.get("op") == "validate":
                    out = {"results": validator.many(req["configs"]), "verl": verl_version()}
                else:
                    out = {"ok": True, "pid": os.getpid(), "verl": verl_version()}
            except Exception as e:  # never die on a bad request
                out = {"error": f"{type(e).__name__}: {e}"[:500]}
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps(out, default=str).encode() + b"\n")
    with contextlib.suppress(OSError):
        if path.stat().st_ino == ino:
            path.unlink()
    with contextlib.suppress(OSError):
        path.with_suffix(".pid").unlink()


def _recv_line(conn: socket.socket) -> bytes:
    chunks = []
    while True:
        b = conn.recv(1 << 20)
        if not b:
            break
        chunks.append(b)
        if b.endswith(b"\n"):
            break
    return b"".join(chunks)


def _request(path: Path, req: dict, timeout: float) -> dict:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(path))
        s.sendall(json.dumps(req, default=str).encode() + b"\n")
        return json.loads(_recv_line(s))
    finally:
        s.close()


def _start_helper(path: Path, start_timeout: float) -> Optional[str]:
    """Start the helper (one at a time, under a lock) and wait until it answers. None = up."""
    d = path.parent
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(OSError, ValueError):
            _request(path, {"op": "ping"}, 2.0)
            return None  # someone else started it while we waited for the lock
        for old in d.glob(f"verl-{_exe_key()}-*.sock"):  # this venv's older helpers see their socket go and exit
            if old != path:
                with contextlib.suppress(OSError):
                    old.unlink()
        log = path.with_suffix(".log")
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                   VERL_USE_EXTERNAL_PLUGINS="none", PYTHONUNBUFFERED="1")
        with open(log, "w") as out:
            proc = subprocess.Popen([sys.executable, "-m", "rayjobs.preflight_verl", "serve", str(path)],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True, close_fds=True)
        deadline = time.monotonic() + start_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-1:]
                return f"the verl helper exited ({proc.returncode}): {tail[0][:200] if tail else 'no output'}"
            with contextlib.suppress(OSError, ValueError):
                _request(path, {"op": "ping"}, 2.0)
                return None
            time.sleep(0.1)
        return f"the verl helper did not start within {start_timeout:.0f} s (see {log})"


def validate(configs: list[dict], timeout: float = 180.0) -> tuple[Optional[list[list[dict]]], str]:
    """Validate configs with verl. Returns (problems per config, "") or (None, why not)."""
    mode = os.environ.get(MODE_ENV, "auto")
    if mode == "off":
        return None, f"{MODE_ENV}=off"
    missing = missing_modules()
    if missing:
        return None, f"{', '.join(missing)} not installed here"
    if mode == "inprocess":
        v = Validator(state_dir())
        return v.many(configs), ""
    path = socket_path()
    out: dict = {}
    for attempt in range(3):  # a helper may be gone (idle exit, killed) between ping and request
        try:
            out = _request(path, {"op": "validate", "configs": configs}, timeout)
            break
        except (OSError, ValueError) as e:
            if attempt == 2:
                return None, f"the verl helper did not answer: {e}"
            why = _start_helper(path, start_timeout=timeout)
            if why:
                return None, why
    if "error" in out:
        return None, f"the verl helper failed: {out['error']}"
    return out["results"], ""


def stop_helper() -> bool:
    """Stop this install's helper by its PID file (tests, ``rayjobs`` maintenance)."""
    pid_file = socket_path().with_suffix(".pid")
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return False
    import signal

    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(OSError):
        socket_path().unlink()
    with contextlib.suppress(OSError):
        pid_file.unlink()
    return True


# =========================================================================== on the cluster
def check_overrides(overrides: list[str]) -> list[str]:
    """Cluster-side preflight of a job's verl overrides: verl's validation + file/env checks."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rayjobs import compose as rc
    from rayjobs.inputs import runtime_problems
    from rayjobs.rules import UNSET, VERL_FIX, Problem

    with initialize_config_dir(config_dir=str(rc.verl_config_dir()), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=list(overrides))
    OmegaConf.resolve(cfg)
    plain = OmegaConf.to_container(cfg, resolve=True)
    results, why = validate([plain])  # the warm helper, shared by the jobs of this node
    if results is None:
        print(f"[rayjobs] preflight: verl's own validation did not run ({why})", file=sys.stderr)
    lines = [Problem(p["key"], UNSET, p["rule"], VERL_FIX).line() for p in (results or [[]])[0]]
    lines += [p.line() for p in runtime_problems(cfg, env_names=set(os.environ), working_dir=os.getcwd())]
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"] and len(argv) == 2:
        serve(Path(argv[1]))
        return 0
    if argv[:1] == ["check"]:
        rest = argv[1:]
        if rest[:1] == ["--"]:
            rest = rest[1:]
        lines = check_overrides(rest)
        for ln in lines:
            print(f"[rayjobs] preflight: {ln}", file=sys.stderr, flush=True)
        return 2 if lines else 0
    print("usage: python -m rayjobs.preflight_verl (serve SOCKET | check -- VERL_OVERRIDES...)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
