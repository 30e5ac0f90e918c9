"""``python -m rayjobs.submit +exp=NAME [key=value ...]``: compose, check, submit (a Hydra app)."""

import os

from rayjobs.submit.app import leave, main

if __name__ == "__main__":
    try:
        main()
    except SystemExit as e:
        if os.environ.get("RAYJOBS_FAST_EXIT", "1") != "0":
            leave(e.code)
        raise
