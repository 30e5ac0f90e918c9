"""``torch.cuda`` as far as the stamps need it: ``is_initialized`` and ``_lazy_init`` (0.1 s once)."""
import time

_done = False


def is_initialized() -> bool:
    return _done


def _lazy_init() -> None:
    global _done
    if not _done:
        time.sleep(0.1)
        _done = True
