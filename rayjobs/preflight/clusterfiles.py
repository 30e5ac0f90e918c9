"""What a job reads on the cluster: data files, model dirs, the reward function (and, through
:mod:`rayjobs.preflight.secretnames`, the secrets its loggers need).

Layer 3 of :mod:`rayjobs.preflight.checks`: the files are checked here when the cluster's storage
is visible from here (the embedded cluster); for a remote cluster, verl checks them on the
cluster when the job starts, before it allocates any GPU.
"""

from __future__ import annotations

import ast
import functools
import os
from pathlib import Path
from typing import Any, Optional

from rayjobs.preflight.keys import as_list, get_key, model_keys, path_kind, runs_verl_trainer
from rayjobs.preflight.problem import Problem, note
from rayjobs.preflight.secretnames import secret_problems
from rayjobs.preflight.verlfacts import reward_known, verl_facts
from rayjobs.config.configcache import plain


def custom_reward(cfg: Any) -> tuple[str, Optional[str], str]:
    """(key, path, function name) of the custom reward function, verl 0.9.1's key first."""
    for base in ("reward.custom_reward_function", "custom_reward_function"):
        path = get_key(cfg, f"{base}.path")
        if path:
            return f"{base}.path", str(path), str(get_key(cfg, f"{base}.name") or "compute_score")
    return "reward.custom_reward_function.path", None, "compute_score"


def runtime_problems(cfg: Any, env_names: Optional[set[str]], working_dir: str, files_visible: bool = True) -> list[Problem]:
    """Checks against the cluster's files (when visible from here) and environment (names only)."""
    cfg = plain(cfg)
    if get_key(cfg, "rayjobs.kind", "verl") != "verl" or not runs_verl_trainer(cfg):
        return []
    out: list[Problem] = []
    data_ok: list[str] = []
    if files_visible:
        for key in ("data.train_files", "data.val_files"):
            for f in as_list(get_key(cfg, key)):
                if path_kind(f) == "absolute":
                    if os.path.isfile(f):
                        data_ok.append(f)
                        _note_sample(f)
                    else:
                        out.append(Problem(key, f, "no such file on the cluster's storage", _prepare_hint(f)))
        for key in model_keys(cfg):
            v = get_key(cfg, key)
            if isinstance(v, str) and path_kind(v) == "absolute":
                if not os.path.isdir(v):
                    out.append(Problem(key, v, "no such model directory on the cluster's storage",
                                       "copy the model there or use its hub id"))
                elif not os.path.isfile(os.path.join(v, "config.json")):
                    out.append(Problem(key, v, "the directory has no config.json (not a Hugging Face model dir)",
                                       "point it at the directory that holds config.json and the tokenizer"))
    out += _reward(cfg, working_dir, data_ok, files_visible)
    if env_names is not None:
        out += secret_problems(cfg, env_names, embedded=files_visible)
    return out


#: The datasets ``+exp=prepare_data`` makes, by the folder name it writes them to (``<storage>/data/<name>/``).
PREPARED_DATASETS = ("gsm8k", "math", "gsm8k_tool")


def _note_sample(path: str) -> None:
    """Say so when a data file is the small sample prepare_data falls back to offline (its prepared.json)."""
    import json

    try:
        doc = json.loads((Path(path).parent / "prepared.json").read_text())
    except (OSError, ValueError):
        return
    if doc.get("sample"):
        rows = doc.get("rows") or {}
        note(f"{Path(path).parent} holds the SAMPLE shipped with rayjobs ({rows.get('train', '?')} train / "
             f"{rows.get('test', '?')} test rows), not the full dataset: fine for a check, not for scores")


def _prepare_hint(path: str) -> str:
    """How to make a missing data file: the prepare_data line for its dataset, when it is one of ours."""
    parts = Path(path).parts
    ds = parts[-2] if len(parts) >= 3 and parts[-3] == "data" else ""
    if ds in PREPARED_DATASETS:
        return f"create it first: python -m rayjobs.submit +exp=prepare_data rayjobs.prepare.dataset={ds}"
    return "create it first (python -m rayjobs.submit +exp=prepare_data rayjobs.prepare.dataset=gsm8k|math|gsm8k_tool) or fix the path"


def _reward(cfg: Any, working_dir: str, data_files: list[str], files_visible: bool) -> list[Problem]:
    key, path, name = custom_reward(cfg)
    if path:
        if path.startswith("pkg://") or "://" in path:
            return []
        full = path if os.path.isabs(path) else os.path.join(working_dir, path)
        if "://" in working_dir and not os.path.isabs(path):
            return []  # a rerun's code is the old job's snapshot on the cluster; the laptop cannot see it
        if not os.path.isabs(path) or files_visible:
            if not os.path.isfile(full):
                where = "the job's working_dir" if not os.path.isabs(path) else "the cluster's storage"
                return [Problem(key, path, f"no such file in {where} ({full})", "fix the path (relative paths ship with the working_dir)")]
            try:
                tree = ast.parse(Path(full).read_text())
                names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
                names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
            except (SyntaxError, OSError, ValueError) as e:
                return [Problem(key, path, f"cannot be parsed as Python ({type(e).__name__})", "fix the reward file")]
            if name not in names:
                nkey = key.rsplit(".", 1)[0] + ".name"
                return [Problem(nkey, name, f"{path} defines no function {name!r}" + (f" (it has: {', '.join(sorted(names))})" if names else ""),
                                f"set {nkey} to the reward function's name")]
        return []
    if get_key(cfg, "reward.reward_model.enable", False) or get_key(cfg, "reward.reward_manager.source", "register") != "register":
        return []  # a reward model or a custom reward manager scores the data
    field = str(get_key(cfg, "data.reward_fn_key", "data_source") or "data_source")
    out = []
    for f in data_files:
        sources = _column_values(f, field)
        if sources is None:
            continue
        if sources == ["<missing column>"]:
            out.append(Problem("data.reward_fn_key", field, f"{f} has no {field!r} column, which verl uses to pick the reward "
                                                            f"function", "regenerate the data (prepare_data) or set data.reward_fn_key"))
            continue
        unknown = [s for s in sources if not reward_known(s)]
        if unknown:
            known = sorted(verl_facts()["reward_exact"])
            out.append(Problem("data.train_files" if f in as_list(get_key(cfg, "data.train_files")) else "data.val_files", f,
                               f"rows have {field}={unknown[0]!r}, for which verl {verl_facts()['version']}'s "
                               f"default_compute_score has no reward function (NotImplementedError at the first reward, mid-run)",
                               f"set reward.custom_reward_function.path=<your_reward.py>, or use a known {field} "
                               f"({', '.join(known[:4])}, ...)"))
    return out


def _column_values(path: str, column: str) -> Optional[list[str]]:
    """Distinct values of one column of a parquet file (None: not parquet / pyarrow missing)."""
    if not path.endswith(".parquet"):
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = f"{os.path.abspath(path)}|{column}|{st.st_mtime_ns}|{st.st_size}"
    seen = _seen_columns()
    if key in seen:  # the same file as a submit before: no pyarrow import (~0.3 s of CPU) to read it again
        return seen[key]
    got = _column_values_cached(path, column, st.st_mtime_ns, st.st_size)
    if got is not None:
        _remember_column(key, got)
    return got


_SEEN_FILE = "preflight-columns.json"  #: in the local state dir: {path|column|mtime|size: distinct values}


@functools.lru_cache(maxsize=1)
def _seen_columns() -> dict[str, list[str]]:
    import json

    from rayjobs import settings

    try:
        doc = json.loads((settings.home() / _SEEN_FILE).read_text())
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def _remember_column(key: str, values: list[str]) -> None:
    import json

    from rayjobs import settings
    from rayjobs.contract.files import write_atomic

    seen = _seen_columns()
    seen[key] = values
    keep = dict(list(seen.items())[-256:])  # bounded: the newest files
    try:
        settings.home().mkdir(parents=True, exist_ok=True)
        write_atomic(settings.home() / _SEEN_FILE, json.dumps(keep).encode())
    except OSError:
        pass


@functools.lru_cache(maxsize=64)
def _column_values_cached(path: str, column: str, _mtime: int, _size: int) -> Optional[list[str]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        note("pyarrow is not installed: the reward-per-data_source check is skipped")
        return None
    try:
        f = pq.ParquetFile(path)  # not read_table: that imports pyarrow.dataset and pandas (~0.5 s a submit)
        if column not in f.schema_arrow.names:
            return ["<missing column>"]
        col = f.read(columns=[column]).column(column)
        return sorted({str(v) for v in col.unique().to_pylist()})
    except Exception as e:
        note(f"could not read {path}: {type(e).__name__}")
        return None
