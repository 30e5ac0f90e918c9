"""Follow a job until it ends (``rayjobs.follow=true``; ``rayjobs tail`` builds on it).

Exit codes (design §3): 0 SUCCEEDED, 1 FAILED, 3 STOPPED.
"""

from __future__ import annotations

import sys
import time
from typing import Optional

from rayjobs import jobs, settings

EXIT_CODES = {"SUCCEEDED": 0, "FAILED": 1, "STOPPED": 3}


def follow(job_id: str, address: Optional[str] = None, poll_s: float = 0.25, timeout_s: float = 7 * 24 * 3600) -> int:
    """Print the job's new log text until it is terminal; return its exit code."""
    target = settings.resolve_target(address)
    if target.embedded:
        from rayjobs import embedded

        target = embedded.ensure(quiet=True)
    c = jobs.client(target)
    seen = 0
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = str(jobs.info(c, job_id).status)
        text = jobs.logs(c, job_id)
        if len(text) > seen:
            sys.stdout.write(text[seen:])
            sys.stdout.flush()
            seen = len(text)
        if status in EXIT_CODES:
            print(f"rayjobs: {job_id} {status}", file=sys.stderr)
            return EXIT_CODES[status]
        time.sleep(poll_s)
    print(f"rayjobs: stopped following {job_id} after {timeout_s:.0f} s", file=sys.stderr)
    return 4
