"""scripts/prepare_data.py on local data and the shipped sample (nothing is downloaded in tests).

Every run gets ``HF_ENDPOINT=http://127.0.0.1:9`` (nothing listens on the discard port) and an empty
``HF_HOME``: the hub is unreachable even on a machine with internet, and no test can touch it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "prepare_data.py"
SAMPLE = REPO / "scripts" / "data"
sys.path.insert(0, str(REPO / "scripts"))
import prepare_data  # noqa: E402

NO_HUB = "http://127.0.0.1:9"
FALLBACK = re.compile(
    r"^(gsm8k_tool|gsm8k|math): the Hugging Face hub is not reachable \((?P<reason>[^\n]+)\); using the sample shipped with "
    r"rayjobs: 64 train / 32 test rows, NOT the full dataset \(for the full one, run where the hub is reachable, "
    r"or rayjobs\.prepare\.source=<dir or file>\)$")


def prepare(tmp_path: Path, *args: str, env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Run the script as the job does, with the hub made unreachable unless ``env`` says otherwise."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    full.update({"HF_ENDPOINT": NO_HUB, "HF_HOME": str(tmp_path / "hf-home")}, **(env or {}))
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=full, timeout=60)


def parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def assert_one_error_line(r: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 2, and stderr is exactly one ``error:`` line (no traceback) naming each needle."""
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for needle in needles:
        assert needle in lines[0]


# --------------------------------------------------------------------------- conversion
def test_gsm8k_answer_and_math_boxed():
    assert prepare_data.gsm8k_answer("so 3 + 4 = 7\n#### 1,234") == "1234"
    assert prepare_data.last_boxed(r"first \boxed{1} then \boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    with pytest.raises(ValueError):
        prepare_data.gsm8k_answer("no marker")


def test_math_rows_follow_verls_schema(tmp_path):
    src = tmp_path / "math"
    src.mkdir()
    rows = [{"problem": "1+1?", "solution": r"It is \boxed{2}."}, {"problem": "x?", "solution": "no box"}]
    for split in ("train", "test"):
        (src / f"{split}.json").write_text(json.dumps(rows))
    out = tmp_path / "out"
    r = prepare(tmp_path, "--dataset=math", f"--source={src}", f"--out={out}")
    assert r.returncode == 0, r.stderr
    got = parquet(out / "train.parquet")
    assert len(got) == 1  # rows without a boxed answer are dropped, as verl's preprocessor does
    assert got[0]["data_source"] == "DigitalLearningGmbH/MATH-lighteval"
    assert got[0]["reward_model"] == {"style": "rule", "ground_truth": "2"}
    assert got[0]["prompt"][0]["content"].endswith(r"within \boxed{}.")
    assert "1 rows without a \\boxed{} answer dropped" in r.stdout  # said, not silent


def test_relative_out_is_refused(tmp_path):
    r = prepare(tmp_path, "--dataset=gsm8k", f"--source={tmp_path}", "--out=rel")
    assert r.returncode == 2 and "must be an absolute path" in r.stderr


# --------------------------------------------------------------------------- the shipped sample
@pytest.mark.parametrize("dataset", ["gsm8k", "math"])
def test_sample_has_the_advertised_rows_and_says_it_is_a_sample(tmp_path, dataset):
    out = tmp_path / "out"
    r = prepare(tmp_path, f"--dataset={dataset}", "--source=sample", f"--out={out}")
    assert r.returncode == 0, r.stderr
    train, test = parquet(out / "train.parquet"), parquet(out / "test.parquet")
    assert (len(train), len(test)) == (64, 32)
    truths = [row["reward_model"]["ground_truth"] for row in train + test]
    if dataset == "gsm8k":
        assert all(re.fullmatch(r"-?\d+(\.\d+)?", t) for t in truths), truths
    else:
        assert all(t.strip() for t in truths)
    assert f"{dataset} train: 64 rows -> {out / 'train.parquet'} (SAMPLE of 64 rows, not the full dataset)" in r.stdout
    assert f"{dataset} test: 32 rows -> {out / 'test.parquet'} (SAMPLE of 32 rows, not the full dataset)" in r.stdout
    meta = json.loads((out / "prepared.json").read_text())
    assert meta["dataset"] == dataset and meta["source"] == "sample" and meta["sample"] is True
    assert meta["rows"] == {"train": 64, "test": 32} and meta["prepared_at"]
    # Each sample file is small and its rows are disjoint from the other split's.
    for split in ("train", "test"):
        assert (SAMPLE / dataset / f"{split}.jsonl").stat().st_size < 100_000
    key = "question" if dataset == "gsm8k" else "problem"
    split_rows = {s: {json.loads(x)[key] for x in (SAMPLE / dataset / f"{s}.jsonl").read_text().splitlines()}
                  for s in ("train", "test")}
    assert not split_rows["train"] & split_rows["test"]
    assert (SAMPLE / "NOTICE.md").is_file()


def test_gsm8k_tool_rows_are_verls_tool_use_format(tmp_path):
    """gsm8k_tool from the shipped GSM8K sample: verl's gsm8k_multiturn_w_tool.py rows, field for field,
    with tools_kwargs keyed by the function name of the tool config the preset ships."""
    import yaml

    out = tmp_path / "out"
    r = prepare(tmp_path, "--dataset=gsm8k_tool", "--source=sample", f"--out={out}")
    assert r.returncode == 0, r.stderr
    assert f"gsm8k_tool train: 64 rows -> {out / 'train.parquet'} (SAMPLE of 64 rows, not the full dataset)" in r.stdout
    tool_cfg = yaml.safe_load((REPO / "scripts" / "multiturn" / "gsm8k_tool_config.yaml").read_text())
    tool = tool_cfg["tools"][0]["tool_schema"]["function"]["name"]
    assert tool == prepare_data.GSM8K_TOOL_NAME == "calc_gsm8k_reward"
    system = ("You are a math expert. You are given a question and you need to solve it step by step. "
              "Reasoning step by step before any tool call. You should use the `calc_gsm8k_reward` tool after step "
              "by step solving the question, before generate final answer at least once and refine your answer if "
              "necessary. Put your final answer in the format of `#### <answer>`.")
    for split, n in (("train", 64), ("test", 32)):
        src = [json.loads(x) for x in (SAMPLE / "gsm8k" / f"{split}.jsonl").read_text().splitlines()]
        got = parquet(out / f"{split}.parquet")
        assert len(got) == n == len(src)
        for idx, (row, rec) in enumerate(zip(got, src)):
            truth = prepare_data.gsm8k_answer(rec["answer"])
            assert row == {
                "data_source": "openai/gsm8k",
                "prompt": [{"role": "system", "content": system},
                           {"role": "user", "content": rec["question"] + " Let's think step by step and output the "
                                                                          "final answer after `####`."}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": truth},
                "extra_info": {"split": split, "index": idx, "answer": rec["answer"], "question": rec["question"],
                               "need_tools_kwargs": True,
                               "tools_kwargs": {tool: {"create_kwargs": {"ground_truth": truth}}}},
            }
    meta = json.loads((out / "prepared.json").read_text())
    assert meta["dataset"] == "gsm8k_tool" and meta["sample"] is True and meta["rows"] == {"train": 64, "test": 32}


def test_gsm8k_tool_from_a_local_file_and_plain_gsm8k_unchanged(tmp_path):
    """Local GSM8K-column data works for gsm8k_tool too; the single-turn gsm8k rows gain no tool fields."""
    src = tmp_path / "train.jsonl"
    src.write_text("".join(json.dumps({"question": f"{i}+{i}?", "answer": f"so #### {2 * i}"}) + "\n" for i in range(10)))
    out = tmp_path / "tool"
    r = prepare(tmp_path, "--dataset=gsm8k_tool", f"--source={src}", f"--out={out}")
    assert r.returncode == 0, r.stderr
    test = parquet(out / "test.parquet")
    assert len(test) == 1 and test[0]["extra_info"]["tools_kwargs"] == {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "18"}}}
    r = prepare(tmp_path, "--dataset=gsm8k", f"--source={src}", f"--out={tmp_path / 'plain'}")
    assert r.returncode == 0, r.stderr
    plain = parquet(tmp_path / "plain" / "train.parquet")[0]
    assert [m["role"] for m in plain["prompt"]] == ["user"] and plain["prompt"][0]["content"].endswith('after "####".')
    assert set(plain["extra_info"]) == {"split", "index", "answer", "question"}


# --------------------------------------------------------------------------- auto
@pytest.mark.parametrize("dataset", ["gsm8k", "math", "gsm8k_tool"])
def test_auto_falls_back_to_the_sample_when_the_hub_is_unreachable(tmp_path, dataset):
    out = tmp_path / "out"
    t0 = time.monotonic()
    r = prepare(tmp_path, f"--dataset={dataset}", f"--out={out}")  # auto is the default
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 30
    lines = r.stdout.splitlines()
    m = FALLBACK.match(lines[0])
    assert m and m.group(1) == dataset, lines[0]
    assert "Connect" in m.group("reason")  # short: the kind of failure, not a traceback
    assert sum("not reachable" in line for line in lines) == 1
    assert "Traceback" not in r.stderr and r.stderr.strip() == "", r.stderr
    meta = json.loads((out / "prepared.json").read_text())
    assert meta["source"] == "sample" and meta["sample"] is True and meta["rows"] == {"train": 64, "test": 32}


def test_auto_offline_falls_back_and_a_silent_hub_is_given_up_on(tmp_path):
    """HF_HUB_OFFLINE=1 without a cached copy, and a hub that accepts but never answers (bounded)."""
    t0 = time.monotonic()
    r = prepare(tmp_path, "--dataset=gsm8k", f"--out={tmp_path / 'a'}", env={"HF_HUB_OFFLINE": "1"})
    offline = time.monotonic() - t0  # the same imports and fallback, no hub: what a loaded machine adds
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    reason = FALLBACK.match(r.stdout.splitlines()[0]).group("reason")
    assert reason == "HF_HUB_OFFLINE is set and there is no cached copy"
    with socket.socket() as silent:  # accepts connections (kernel backlog), never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        t0 = time.monotonic()
        r = prepare(tmp_path, "--dataset=gsm8k", f"--out={tmp_path / 'b'}",
                    env={"HF_ENDPOINT": f"http://127.0.0.1:{silent.getsockname()[1]}", "HF_HUB_ETAG_TIMEOUT": "1"})
        took = time.monotonic() - t0
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    # given up on within its 1-s timeouts (the hub client's default would wait 10 s a request)
    assert FALLBACK.match(r.stdout.splitlines()[0]) and took - offline < 8, (took, offline, r.stdout)


def test_auto_uses_a_cached_hub_copy_when_offline(tmp_path):
    """The hub path itself (no network): HF_HUB_OFFLINE=1 with the dataset in the hub cache."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    commit = "0" * 40
    repo = tmp_path / "hf-home" / "hub" / "datasets--openai--gsm8k"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    for config, n in (("main", 5), ("socratic", 7)):
        snap = repo / "snapshots" / commit / config
        snap.mkdir(parents=True)
        rows = [{"question": f"{i}+{i}?", "answer": f"#### {2 * i}"} for i in range(n)]
        for split in ("train", "test"):
            pq.write_table(pa.Table.from_pylist(rows), snap / f"{split}-00000-of-00001.parquet")
    out = tmp_path / "out"
    r = prepare(tmp_path, "--dataset=gsm8k", "--source=auto", f"--out={out}", env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
    assert "not reachable" not in r.stdout and "SAMPLE" not in r.stdout
    meta = json.loads((out / "prepared.json").read_text())
    assert meta["source"] == "hub" and meta["sample"] is False and meta["rows"] == {"train": 5, "test": 5}


def test_hub_unreachable_is_one_error_line(tmp_path):
    r = prepare(tmp_path, "--dataset=gsm8k", "--source=hub", f"--out={tmp_path / 'out'}")
    assert_one_error_line(r, "not reachable", "rayjobs.prepare.source=sample")
    assert not (tmp_path / "out" / "prepared.json").exists()


# --------------------------------------------------------------------------- paths
def test_file_source_with_a_sibling_test_file(tmp_path):
    """A .parquet train file; its test split is the sibling named with train -> test."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for split in ("train", "test"):
        rows = [json.loads(x) for x in (SAMPLE / "gsm8k" / f"{split}.jsonl").read_text().splitlines()]
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / f"gsm8k_{split}_v1.parquet")
    out = tmp_path / "out"
    r = prepare(tmp_path, "--dataset=gsm8k", f"--source={tmp_path / 'gsm8k_train_v1.parquet'}", f"--out={out}")
    assert r.returncode == 0, r.stderr
    assert f"test split from {tmp_path / 'gsm8k_test_v1.parquet'}" in r.stdout
    assert (len(parquet(out / "train.parquet")), len(parquet(out / "test.parquet"))) == (64, 32)
    meta = json.loads((out / "prepared.json").read_text())
    assert meta["source"] == str(tmp_path / "gsm8k_train_v1.parquet") and meta["sample"] is False


def test_file_source_without_a_sibling_holds_out_its_last_tenth(tmp_path):
    src = tmp_path / "mytrain.jsonl"
    shutil.copy(SAMPLE / "math" / "train.jsonl", src)
    out = tmp_path / "out"
    r = prepare(tmp_path, "--dataset=math", f"--source={src}", f"--out={out}")
    assert r.returncode == 0, r.stderr
    assert "no mytest.jsonl next to it, so its last 6 of 64 rows are held out as the test split" in r.stdout
    train, test = parquet(out / "train.parquet"), parquet(out / "test.parquet")
    assert (len(train), len(test)) == (58, 6)
    last = json.loads(src.read_text().splitlines()[-1])
    assert test[-1]["prompt"][0]["content"].startswith(last["problem"])  # the held-out rows are the last ones
    assert json.loads((out / "prepared.json").read_text())["rows"] == {"train": 58, "test": 6}


def test_missing_path_is_one_error_line(tmp_path):
    missing = tmp_path / "nowhere" / "train.jsonl"
    r = prepare(tmp_path, "--dataset=gsm8k", f"--source={missing}", f"--out={tmp_path / 'out'}")
    assert_one_error_line(r, str(missing), "no such file or directory")


def test_wrong_columns_is_one_error_line(tmp_path):
    src = tmp_path / "train.jsonl"
    shutil.copy(SAMPLE / "gsm8k" / "train.jsonl", src)  # GSM8K columns, given as MATH
    r = prepare(tmp_path, "--dataset=math", f"--source={src}", f"--out={tmp_path / 'out'}")
    assert_one_error_line(r, "problem, solution", "found: answer, question")
