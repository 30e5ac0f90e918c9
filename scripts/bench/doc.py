"""What a benchmark writes: markdown tables of its numbers and its own section of docs/benchmarks.md,
between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` (each script owns its sections); and the
flags every benchmark has: ``--quick`` (a small run that checks it works) and ``--no-doc``."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from bench import REPO
from bench.timing import median

DOC = REPO / "docs" / "benchmarks.md"


def table(head: Sequence[str], rows: Iterable[Sequence[Any]], align: str = "") -> str:
    """A markdown table: ``head`` cells, ``rows`` of cells (each ``str()``-ed), ``align`` one letter a
    column (``l``: left, ``r``: right; default: the first left, the others right)."""
    align = align or "l" + "r" * (len(head) - 1)
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    line = lambda cells: "|" + "|".join(f" {c} " if str(c) else " " for c in cells) + "|"  # noqa: E731
    return "\n".join([line(head), rule, *map(line, rows)])


def stats(xs: Sequence[float], digits: int = 2, every: bool = True) -> list[str]:
    """The cells median, min, max (and, with ``every``, all of them) of ``xs``; dashes for none."""
    if not xs:
        return ["-"] * (4 if every else 3)
    f = f"{{:.{digits}f}}"
    cells = [f.format(median(xs)), f.format(min(xs)), f.format(max(xs))]
    return cells + [", ".join(f.format(x) for x in xs)] if every else cells


def spread(xs: Iterable[Optional[float]], digits: int = 1) -> str:
    """``median (min-max)`` of the known values of ``xs``; a dash for none."""
    ys = sorted(x for x in xs if x is not None)
    if not ys:
        return "-"
    f = f"{{:.{digits}f}}"
    return f"{f.format(median(ys))} ({f.format(ys[0])}-{f.format(ys[-1])})"


def met(value: Optional[float], target: float) -> str:
    """``met`` when ``value`` is at most ``target``, else ``missed``; ``-`` when nothing was measured."""
    if value is None or value != value:
        return "-"
    return "met" if value <= target else "missed"


def write_section(name: str, markdown: str, doc: Path = DOC) -> None:
    """Replace (or append) the section ``name`` of ``doc``."""
    doc.parent.mkdir(parents=True, exist_ok=True)
    text = doc.read_text() if doc.exists() else "# Benchmarks\n\nEach section is written by its script under `scripts/`; rerun it to refresh.\n"
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{begin}\n{markdown.strip()}\n{end}"
    if begin in text:
        text = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda m: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    doc.write_text(text)


def parse(ap: argparse.ArgumentParser, quick: dict[str, Any], argv: Optional[list[str]] = None) -> argparse.Namespace:
    """Add the flags every benchmark has and parse: ``--quick`` runs at the sizes ``quick`` gives (a
    check that the benchmark works, minutes at most) and leaves the doc alone, as ``--no-doc`` does."""
    sizes = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in quick.items())
    ap.add_argument("--quick", action="store_true", help=f"a small run that leaves the doc alone ({sizes})")
    ap.add_argument("--no-doc", "--no-write", dest="no_doc", action="store_true",
                    help="print the section, leave docs/benchmarks.md alone")
    unknown = set(quick) - {act.dest for act in ap._actions}
    if unknown:  # a size the parser does not have would be set and never read
        raise ValueError(f"--quick sets {sorted(unknown)}, which are not flags of this benchmark")
    args = sys.argv[1:] if argv is None else argv
    if "--quick" in args:
        ap.set_defaults(**quick)
    a = ap.parse_args(args)
    a.no_doc = a.no_doc or a.quick
    return a


def publish(a: argparse.Namespace, name: str, markdown: str) -> None:
    """Print the section; write it into docs/benchmarks.md unless ``--no-doc`` / ``--quick``."""
    print(markdown)
    if not a.no_doc:
        write_section(name, markdown)
