"""The harness's former single module, kept as names over :mod:`bench` for a script written against it
(``bench_team.py`` was begun on it): new benchmarks import ``bench`` itself. Importing it puts ``tests/``
on ``sys.path``, as before."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import REPO  # noqa: E402,F401
from bench.doc import DOC, write_section  # noqa: E402,F401
from bench.session import isolated_home, private_netns  # noqa: E402,F401
from bench.timing import interleaved, median, timed, timed_cpu  # noqa: E402,F401
