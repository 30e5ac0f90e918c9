"""The benchmarks under ``scripts/`` stay runnable: every one imports (with the harness, ``scripts/bench/``)
and parses its flags, ``--quick`` included, without starting Ray. Running them is ``--quick``'s job (see
docs/benchmarks.md); this catches a broken import or flag in the fast tier."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
BENCHMARKS = sorted(p.stem for p in SCRIPTS.glob("bench_*.py"))
HARNESS = sorted(f"bench.{p.stem}" for p in (SCRIPTS / "bench").glob("*.py") if p.stem != "__init__")


@pytest.fixture(autouse=True)
def _scripts_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(SCRIPTS))


def test_the_harness_and_the_report_helpers_import() -> None:
    assert {"bench.doc", "bench.jobs", "bench.sample", "bench.session", "bench.timing"} <= set(HARNESS)
    for name in ["bench", *HARNESS, "benchlib", "halving_model", "halving_report", "preempt_report", "tuneasha"]:
        importlib.import_module(name)
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()


@pytest.mark.parametrize("name", BENCHMARKS)
def test_a_benchmark_imports_and_parses_its_flags(name: str, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from bench import doc

    mod = importlib.import_module(name)
    harnessed = getattr(mod, "doc", None) is doc  # its flags come from the harness (bench.doc.parse)
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *(["--quick"] if harnessed else []), "--help"])
    with pytest.raises(SystemExit) as e:
        mod.main()
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert not harnessed or ("--quick" in out and "--no-doc" in out)


def test_quick_sizes_must_be_flags_of_the_benchmark() -> None:
    import argparse

    from bench import doc

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    with pytest.raises(ValueError, match="jobs"):
        doc.parse(ap, {"jobs": 3}, argv=[])
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    a = doc.parse(ap, {"rounds": 1}, argv=["--quick"])
    assert (a.rounds, a.no_doc) == (1, True)
