"""scripts/prepare_data.py on local samples (nothing is downloaded in tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import prepare_data  # noqa: E402


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
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "prepare_data.py"), "--dataset=math",
                        f"--source={src}", f"--out={out}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    import pyarrow.parquet as pq

    got = pq.read_table(out / "train.parquet").to_pylist()
    assert len(got) == 1  # rows without a boxed answer are dropped, as verl's preprocessor does
    assert got[0]["data_source"] == "DigitalLearningGmbH/MATH-lighteval"
    assert got[0]["reward_model"] == {"style": "rule", "ground_truth": "2"}
    assert got[0]["prompt"][0]["content"].endswith(r"within \boxed{}.")


def test_relative_out_is_refused(tmp_path):
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "prepare_data.py"), "--dataset=gsm8k",
                        f"--source={tmp_path}", "--out=rel"], capture_output=True, text=True)
    assert r.returncode == 2 and "must be an absolute path" in r.stderr
