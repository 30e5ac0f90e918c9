"""The benchmarks' harness: what every ``scripts/bench_*.py`` shares, so each reads as its measurement.

* :mod:`bench.session`: a run's isolated ``$RAYJOBS_HOME``, the user's project as the current dir, a
  private network namespace, and the tests' own cluster factory (``tests/clusters.py``).
* :mod:`bench.timing`: a command's wall (and CPU) time, rounds interleaved, medians.
* :mod:`bench.sample`: Ray's state sampled on this machine: a cluster's processes and RSS, a process's
  CPU, the free GPUs in Ray's view.
* :mod:`bench.jobs`: sending a benchmark's jobs, and what their runners say in their logs.
* :mod:`bench.doc`: the tables and the section of ``docs/benchmarks.md`` a benchmark writes, and the
  flags every benchmark has (``--quick``, ``--no-doc``).

The bounded wait and the user's commands are the tests' own (``tests/clusterops.py``). Importing this
package puts ``tests/`` on ``sys.path``; it starts nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))
