"""A stand-in for ``torch`` in CPU tests of rayjobs' start-up stamps (tests/test_warm_*.py): an
import that takes a moment, and ``torch.cuda``'s lazy init. Never on sys.path by default."""
import time

time.sleep(0.1)
from torch import cuda  # noqa: E402,F401
