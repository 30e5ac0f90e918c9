"""Turn GSM8K or MATH into the parquet files verl reads (``train.parquet``, ``test.parquet``).

Runs as a rayjobs experiment (``python -m rayjobs.submit +exp=prepare_data``), so it executes on
the cluster and writes once into the shared storage root instead of on every node at every launch.

Rows follow verl's own preprocessors (examples/data_preprocess/gsm8k.py, math_dataset.py):
``data_source``, ``prompt`` (chat messages), ``ability``, ``reward_model`` (rule, ground truth) and
``extra_info``; the data_source values select verl's built-in reward functions.

``--source hub`` downloads the dataset's parquet files from the Hugging Face hub;
``--source DIR`` reads ``DIR/train.{jsonl,json,parquet}`` and ``DIR/test.*`` with the hub
dataset's columns (GSM8K: question, answer; MATH: problem, solution) -- for machines without
internet and for tests.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Iterable, Optional

DATASETS = {
    "gsm8k": {
        "hub": "openai/gsm8k",
        "data_source": "openai/gsm8k",
        "instruction": 'Let\'s think step by step and output the final answer after "####".',
    },
    "math": {
        "hub": "DigitalLearningGmbH/MATH-lighteval",
        "data_source": "DigitalLearningGmbH/MATH-lighteval",
        "instruction": "Let's think step by step and output the final answer within \\boxed{}.",
    },
}


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
    spec = DATASETS[name]
    rows = []
    for idx, r in enumerate(records):
        if name == "gsm8k":
            question, raw = r["question"], r["answer"]
            truth = gsm8k_answer(raw)
            extra = {"split": split, "index": idx, "answer": raw, "question": question}
        else:
            question, raw = r["problem"], r["solution"]
            truth = last_boxed(raw)
            if truth is None:
                continue  # verl's preprocessor also needs a boxed answer
            extra = {"split": split, "index": idx}
        rows.append({
            "data_source": spec["data_source"],
            "prompt": [{"role": "user", "content": question + " " + spec["instruction"]}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": truth},
            "extra_info": extra,
        })
    return rows


def read_records(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    text = path.read_text()
    if path.suffix == ".json":
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def local_split(source: Path, split: str) -> Path:
    for ext in (".parquet", ".jsonl", ".json"):
        p = source / f"{split}{ext}"
        if p.exists():
            return p
    raise FileNotFoundError(f"{source} has no {split}.parquet/.jsonl/.json")


def hub_split(repo: str, split: str) -> Path:
    from huggingface_hub import snapshot_download

    root = Path(snapshot_download(repo_id=repo, repo_type="dataset", allow_patterns=["*.parquet"]))
    files = sorted(p for p in root.rglob("*.parquet") if p.name.startswith(split))
    if repo == "openai/gsm8k":  # the "main" config, not "socratic"
        files = [p for p in files if p.parent.name == "main"]
    if not files:
        raise FileNotFoundError(f"no {split} parquet in {repo}")
    return files[0]


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    os.replace(tmp, path)  # readers never see half a file


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", choices=sorted(DATASETS), required=True)
    ap.add_argument("--source", default="hub", help="'hub' or a directory with train/test files")
    ap.add_argument("--out", required=True, help="absolute output directory")
    a = ap.parse_args(argv)
    out = Path(a.out)
    if not out.is_absolute():
        print(f"error: --out={a.out!r} must be an absolute path", file=sys.stderr)
        return 2
    for split in ("train", "test"):
        src = hub_split(DATASETS[a.dataset]["hub"], split) if a.source == "hub" else local_split(Path(a.source), split)
        rows = to_rows(a.dataset, split, read_records(src))
        write_parquet(rows, out / f"{split}.parquet")
        print(f"{a.dataset} {split}: {len(rows)} rows -> {out / f'{split}.parquet'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
