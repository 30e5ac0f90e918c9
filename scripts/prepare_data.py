"""Turn GSM8K or MATH into the parquet files verl reads (``train.parquet``, ``test.parquet``).

Runs as a rayjobs experiment (``python -m rayjobs.submit +exp=prepare_data``), so it executes on
the cluster and writes once into the shared storage root instead of on every node at every launch.

Rows follow verl's own preprocessors (examples/data_preprocess/gsm8k.py, math_dataset.py, and for
``gsm8k_tool`` gsm8k_multiturn_w_tool.py: a system prompt asking for the ``calc_gsm8k_reward`` tool
and ``extra_info.need_tools_kwargs``/``tools_kwargs`` with the ground truth for it):
``data_source``, ``prompt`` (chat messages), ``ability``, ``reward_model`` (rule, ground truth) and
``extra_info``; the data_source values select verl's built-in reward functions.

``--source`` is one of:

* ``auto`` (default): the Hugging Face hub; if the hub cannot be reached (no DNS, connection
  refused, timeout, ``HF_HUB_OFFLINE=1`` without a cached copy) the small sample shipped in
  ``data/`` next to this script, announced by one line on stdout.
* ``hub``: the hub only; unreachable is an error.
* ``sample``: the shipped sample (GSM8K and MATH, a few dozen real rows each; see data/NOTICE.md).
* a directory: ``DIR/train.{parquet,jsonl,json}`` and ``DIR/test.*``.
* a file (``.parquet``, ``.jsonl``, ``.json``): the train split; the test split is the sibling
  file with ``train`` replaced by ``test`` in its name if that exists, else the file's last 10%.

Local data needs the hub dataset's columns (GSM8K and gsm8k_tool: question, answer; MATH: problem, solution).
Next to the parquet files goes ``prepared.json`` (dataset, source, sample or not, row counts), so
other tools can tell the sample from the full data.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import socket
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

#: The tool of ``+exp=gsm8k_multiturn_tools`` (scripts/multiturn/gsm8k_tool_config.yaml): the key of
#: ``extra_info.tools_kwargs`` must be this function name, or verl hands the tool no ground truth.
GSM8K_TOOL_NAME = "calc_gsm8k_reward"
DATASETS = {
    "gsm8k": {
        "hub": "openai/gsm8k",
        "data_source": "openai/gsm8k",
        "instruction": 'Let\'s think step by step and output the final answer after "####".',
        "columns": ("question", "answer"),
    },
    "math": {
        "hub": "DigitalLearningGmbH/MATH-lighteval",
        "data_source": "DigitalLearningGmbH/MATH-lighteval",
        "instruction": "Let's think step by step and output the final answer within \\boxed{}.",
        "columns": ("problem", "solution"),
    },
    # GSM8K for multi-turn tool use: verl's examples/data_preprocess/gsm8k_multiturn_w_tool.py rows
    # (a system prompt that asks for the tool, its instruction with backticks, tools_kwargs). Same
    # input as gsm8k (hub dataset, shipped sample, local files), written to its own data/gsm8k_tool/.
    "gsm8k_tool": {
        "hub": "openai/gsm8k",
        "data_source": "openai/gsm8k",
        "instruction": "Let's think step by step and output the final answer after `####`.",
        "columns": ("question", "answer"),
        "sample": "gsm8k",
        "system": ("You are a math expert. You are given a question and you need to solve it step by step. "
                   "Reasoning step by step before any tool call. "
                   f"You should use the `{GSM8K_TOOL_NAME}` tool after step by step solving the question, "
                   "before generate final answer at least once and refine your answer if necessary. "
                   "Put your final answer in the format of `#### <answer>`."),
    },
}
SPLITS = ("train", "test")
SAMPLE_DIR = Path(__file__).resolve().parent / "data"  # travels with the job's working_dir
LOCAL_SUFFIXES = (".parquet", ".jsonl", ".json")
HOLDOUT = 0.1  # share of a lone file's rows kept as the test split
# huggingface_hub reads these when it is imported; they bound its metadata and file requests (its
# repo-info call has no timeout at all, hence the bounded probe in load_hub, which uses the etag one
# as its deadline), so neither `auto` nor `hub` hangs on a firewalled network. 10 s is their default.
os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "10")
os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "10")


class SourceError(Exception):
    """A problem with the input the user can fix: printed as one ``error:`` line, exit 2."""


class HubUnreachable(Exception):
    """The hub cannot be reached from here; ``str()`` is a short reason."""


@dataclass
class Loaded:
    """Source records of both splits, and where they came from."""

    records: dict[str, list[dict[str, Any]]]
    source: str  # "hub", "sample" or the resolved path
    sample: bool = False
    inputs: dict[str, str] = field(default_factory=dict)  # split -> where its rows came from
    notes: list[str] = field(default_factory=list)  # lines printed before the split lines


# --------------------------------------------------------------------------- rows
def gsm8k_answer(solution: str) -> str:
    """The number after ``####`` (commas dropped), as verl's gsm8k preprocessor extracts it."""
    m = re.search(r"#### (\-?[0-9\.\,]+)", solution)
    if not m:
        raise ValueError(f"no '#### <answer>' in GSM8K solution: {solution[-80:]!r}")
    return m.group(1).replace(",", "")


def last_boxed(text: str) -> Optional[str]:
    """Content of the last ``\\boxed{...}`` (balanced braces), or None."""
    i = text.rfind("\\boxed")
    if i < 0:
        return None
    j = text.find("{", i)
    if j < 0:
        return None
    depth = 0
    for k in range(j, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return text[j + 1:k]
    return None


def to_rows(name: str, split: str, records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """verl rows from the hub dataset's records (MATH rows without a boxed answer are dropped)."""
    spec = DATASETS[name]
    rows = []
    for idx, r in enumerate(records):
        if spec["columns"][0] == "question":  # gsm8k, gsm8k_tool
            question, raw = r["question"], r["answer"]
            truth = gsm8k_answer(raw)
            extra = {"split": split, "index": idx, "answer": raw, "question": question}
        else:
            question, raw = r["problem"], r["solution"]
            truth = last_boxed(raw)
            if truth is None:
                continue  # verl's preprocessor also needs a boxed answer
            extra = {"split": split, "index": idx}
        prompt = [{"role": "user", "content": question + " " + spec["instruction"]}]
        if "system" in spec:  # gsm8k_tool: verl's tool agent hands create_kwargs to the tool per call
            prompt.insert(0, {"role": "system", "content": spec["system"]})
            extra.update(need_tools_kwargs=True,
                         tools_kwargs={GSM8K_TOOL_NAME: {"create_kwargs": {"ground_truth": truth}}})
        rows.append({
            "data_source": spec["data_source"],
            "prompt": prompt,
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": truth},
            "extra_info": extra,
        })
    return rows


def checked_rows(name: str, split: str, records: list[dict[str, Any]], origin: str) -> list[dict[str, Any]]:
    """:func:`to_rows`, with wrong columns or a GSM8K answer without ``####`` as a :class:`SourceError`."""
    want = DATASETS[name]["columns"]
    for i, r in enumerate(records):
        missing = [c for c in want if not isinstance(r, dict) or not isinstance(r.get(c), str)]
        if missing:
            found = ", ".join(sorted(r)) if isinstance(r, dict) else type(r).__name__
            raise SourceError(f"{origin}: row {i} has no text column(s) {', '.join(missing)} (found: {found}); "
                              f"{name} needs {', '.join(want)}, the hub dataset's columns")
    try:
        rows = to_rows(name, split, records)
    except ValueError as e:
        raise SourceError(f"{origin}: {e}; GSM8K answers end with '#### <number>'") from None
    if not rows:
        raise SourceError(f"{origin}: no usable {split} rows (of {len(records)}); "
                          f"MATH solutions need a \\boxed{{}} answer")
    return rows


# --------------------------------------------------------------------------- local files
def read_records(path: Path) -> list[dict[str, Any]]:
    """Records of a .parquet, .jsonl or .json file (a .json may also hold JSON lines)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as e:  # pyarrow raises several types for a broken file
            raise SourceError(f"{path}: not a readable parquet file ({e})") from None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SourceError(f"{path}: cannot be read as UTF-8 text ({e})") from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
            if not isinstance(data, list):
                raise SourceError(f"{path}: a .json source must hold a list of rows (or JSON lines)")
            return data
        except json.JSONDecodeError:
            pass  # many "*.json" dataset files are JSON lines: read them as such
    records = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise SourceError(f"{path}: line {n} is not JSON ({e.msg})") from None
    return records


def local_split(source: Path, split: str) -> Path:
    """``source/<split>.{parquet,jsonl,json}``."""
    for ext in LOCAL_SUFFIXES:
        p = source / f"{split}{ext}"
        if p.exists():
            return p
    raise SourceError(f"{source} has no {split}.parquet/.jsonl/.json; a directory source needs "
                      f"train.* and test.* (or give one file: rayjobs.prepare.source=/path/train.jsonl)")


def load_dir(path: Path, source: str, sample: bool = False) -> Loaded:
    """Both splits from a directory (also the shipped sample's layout)."""
    files = {split: local_split(path, split) for split in SPLITS}
    return Loaded({s: read_records(p) for s, p in files.items()}, source, sample,
                  {s: str(p) for s, p in files.items()})


def load_file(path: Path) -> Loaded:
    """One file is the train split; its ``train``->``test`` sibling, or its last 10%, the test split."""
    if path.suffix not in LOCAL_SUFFIXES:
        raise SourceError(f"{path}: a file source must end in .parquet, .jsonl or .json")
    train = read_records(path)
    sibling = path.with_name(path.name.replace("train", "test"))
    if sibling != path and sibling.is_file():
        note = f"train split from {path}; test split from {sibling}"
        return Loaded({"train": train, "test": read_records(sibling)}, str(path),
                      inputs={"train": str(path), "test": str(sibling)}, notes=[note])
    if len(train) < 2:
        raise SourceError(f"{path}: {len(train)} row(s); a lone file needs at least 2 to hold out a test split")
    k = max(1, int(len(train) * HOLDOUT))
    why = f"no {sibling.name} next to it" if sibling != path else "no 'train' in its name to find a test file by"
    note = (f"train split from {path}; {why}, so its last {k} of {len(train)} rows "
            f"are held out as the test split")
    return Loaded({"train": train[:-k], "test": train[-k:]}, str(path),
                  inputs={"train": f"{path} (first {len(train) - k} rows)", "test": f"{path} (last {k} rows)"},
                  notes=[note])


def sample_name(name: str) -> str:
    """The folder of ``data/`` holding a dataset's sample (gsm8k_tool is made from the GSM8K one)."""
    return str(DATASETS[name].get("sample", name))


def load_sample(name: str) -> Loaded:
    """The sample shipped with rayjobs (``data/<dataset>/``): real rows, NOT the full dataset."""
    folder = SAMPLE_DIR / sample_name(name)
    if not folder.is_dir():  # e.g. a copy of this script without its data/ folder
        raise SourceError(f"the {name} sample shipped with rayjobs is missing ({folder}); run this "
                          f"script from the rayjobs repository, or give a local directory or file")
    loaded = load_dir(folder, "sample", sample=True)
    # As the repository names them: on a cluster the absolute path is a throwaway Ray temp dir.
    loaded.inputs = {s: f"rayjobs scripts/{Path(p).relative_to(SAMPLE_DIR.parent)}" for s, p in loaded.inputs.items()}
    return loaded


# --------------------------------------------------------------------------- hub
def _bounded(fn: Callable[[], Any], seconds: float, what: str) -> Any:
    """``fn()`` in a daemon thread, given up after ``seconds``.

    The hub client sets no timeout on its repo-info request, and DNS resolution ignores socket
    timeouts anyway; a thread with a deadline bounds both. The abandoned thread dies with us.
    """
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # handed to the caller below
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        raise HubUnreachable(f"no answer from {what} within {seconds:g} s")
    if "error" in out:
        raise out["error"]
    return out["value"]


def unreachable_reason(exc: BaseException) -> Optional[str]:
    """A short reason if ``exc`` (or its cause) means the hub cannot be reached, else None."""
    if isinstance(exc, HubUnreachable):  # also when huggingface_hub itself is missing
        return str(exc)
    import httpx
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, HubUnreachable):
            return str(exc)
        if isinstance(exc, (OfflineModeIsEnabled, LocalEntryNotFoundError)) and constants.HF_HUB_OFFLINE:
            return "HF_HUB_OFFLINE is set and there is no cached copy"
        # Network-level failures only: an OSError such as a full disk must stay an error, not a fallback.
        if isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError, socket.gaierror)):
            return f"{type(exc).__name__}: {str(exc)[:120] or 'no detail'}"
        if isinstance(exc, HfHubHTTPError) and exc.response is not None and exc.response.status_code >= 500:
            return f"the hub answered HTTP {exc.response.status_code}"
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def load_hub(name: str) -> Loaded:
    """Both splits from the hub (or the local hub cache when ``HF_HUB_OFFLINE=1``)."""
    try:
        from huggingface_hub import HfApi, constants, snapshot_download
    except ImportError:
        raise HubUnreachable("huggingface_hub is not installed: pip install huggingface_hub") from None
    repo = DATASETS[name]["hub"]
    if not constants.HF_HUB_OFFLINE:  # offline: snapshot_download reads the cache, no network
        deadline = float(constants.HF_HUB_ETAG_TIMEOUT)
        _bounded(lambda: HfApi().dataset_info(repo, timeout=deadline), deadline + 1, constants.ENDPOINT)
    root = Path(snapshot_download(repo_id=repo, repo_type="dataset", allow_patterns=["*.parquet"]))
    files = {split: hub_split(root, repo, split) for split in SPLITS}
    return Loaded({s: read_records(p) for s, p in files.items()}, "hub",
                  inputs={s: f"{repo}: {p.relative_to(root)}" for s, p in files.items()})


def hub_split(root: Path, repo: str, split: str) -> Path:
    """The split's parquet file in a downloaded snapshot of ``repo``."""
    files = sorted(p for p in root.rglob("*.parquet") if p.name.startswith(split))
    if repo == "openai/gsm8k":  # the "main" config, not "socratic"
        files = [p for p in files if p.parent.name == "main"]
    if not files:
        raise SourceError(f"no {split} parquet in the hub dataset {repo}")
    return files[0]


# --------------------------------------------------------------------------- choosing a source
def sample_counts(name: str) -> str:
    """``"64 train / 32 test rows"`` of the shipped sample, counted (so the message stays true)."""
    try:
        n = {s: len(read_records(local_split(SAMPLE_DIR / sample_name(name), s))) for s in SPLITS}
    except SourceError:
        return "a few dozen rows"  # only ever part of another message; load_sample says what is missing
    return f"{n['train']} train / {n['test']} test rows"


def load_auto(name: str) -> Loaded:
    """The hub if it can be reached, else the shipped sample with one line saying so."""
    try:
        return load_hub(name)
    except SourceError:
        raise
    except Exception as e:  # only "cannot reach the hub" falls back: a bad token or a 404 must be seen
        reason = unreachable_reason(e)
        if reason is None:
            raise hub_failure(name, e) from None
    loaded = load_sample(name)
    loaded.notes.append(
        f"{name}: the Hugging Face hub is not reachable ({reason}); using the sample shipped with rayjobs: "
        f"{sample_counts(name)}, NOT the full dataset (for the full one, run where the hub is reachable, "
        f"or rayjobs.prepare.source=<dir or file>)")
    return loaded


def hub_failure(name: str, exc: Exception) -> SourceError:
    """The one-line error for a hub download that failed (unreachable or otherwise)."""
    reason = unreachable_reason(exc)
    if reason is not None:
        what = f"the Hugging Face hub is not reachable ({reason}); run where it is reachable"
    else:  # reachable, but it (or whatever answers at HF_ENDPOINT) refused: say what it said
        detail = (str(exc).strip().splitlines() or [""])[0][:160]
        what = (f"downloading {DATASETS[name]['hub']} from the Hugging Face hub failed ({type(exc).__name__}: "
                f"{detail}); check HF_ENDPOINT, HF_TOKEN and any proxy")
    return SourceError(f"{name}: {what}, or use rayjobs.prepare.source=sample ({sample_counts(name)}, "
                       f"not the full dataset) or a local directory or file")


def load(name: str, source: str) -> Loaded:
    """Records of both splits from ``source`` (see the module docstring for the accepted values)."""
    if source == "auto":
        return load_auto(name)
    if source == "sample":
        return load_sample(name)
    if source == "hub":
        try:
            return load_hub(name)
        except SourceError:
            raise
        except Exception as e:
            raise hub_failure(name, e) from None
    path = Path(source).expanduser().absolute()
    if path.is_dir():
        return load_dir(path, str(path))
    if path.is_file():
        return load_file(path)
    raise SourceError(f"source {source!r}: no such file or directory ({path}, read where the job runs); give "
                      f"auto, hub, sample, a directory with train.*/test.* or a .jsonl/.json/.parquet file")


# --------------------------------------------------------------------------- output
def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` then rename over ``path``: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    """verl's input file, written atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_atomic(path, lambda tmp: pq.write_table(pa.Table.from_pylist(rows), tmp))


def prepare(name: str, source: str, out: Path) -> dict[str, Any]:
    """Read, convert and write both splits; returns what ``prepared.json`` records."""
    loaded = load(name, source)
    rows = {s: checked_rows(name, s, loaded.records[s], loaded.inputs.get(s, s)) for s in SPLITS}
    for line in loaded.notes:
        print(line, flush=True)
    # A stale prepared.json next to new parquet files would misdescribe them: drop it first, write it last.
    (out / "prepared.json").unlink(missing_ok=True)
    for split in SPLITS:
        n, dest = len(rows[split]), out / f"{split}.parquet"
        write_parquet(rows[split], dest)
        dropped = len(loaded.records[split]) - n
        tail = f" (SAMPLE of {n} rows, not the full dataset)" if loaded.sample else ""
        tail += f" ({dropped} rows without a \\boxed{{}} answer dropped)" if dropped else ""
        print(f"{name} {split}: {n} rows -> {dest}{tail}", flush=True)
    meta = {"dataset": name, "source": loaded.source, "sample": loaded.sample,
            "rows": {s: len(rows[s]) for s in SPLITS}, "inputs": loaded.inputs,
            "prepared_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    write_atomic(out / "prepared.json", lambda tmp: tmp.write_text(json.dumps(meta, indent=2) + "\n"))
    return meta


def main(argv: Optional[list[str]] = None) -> int:
    """CLI entry point: 0 on success, 2 (one ``error:`` line on stderr) on a problem with the input."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", choices=sorted(DATASETS), required=True)
    ap.add_argument("--source", default="auto",
                    help="auto (hub, else the shipped sample), hub, sample, a directory with train.*/test.*, "
                         "or a .jsonl/.json/.parquet file (the train split)")
    ap.add_argument("--out", required=True, help="absolute output directory")
    a = ap.parse_args(argv)
    out = Path(a.out)
    if not out.is_absolute():
        print(f"error: --out={a.out!r} must be an absolute path", file=sys.stderr)
        return 2
    try:
        prepare(a.dataset, a.source, out)
    except SourceError as e:
        if os.environ.get("RAYJOBS_DEBUG"):
            raise  # rayjobs' convention: tracebacks on request only
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
