"""``torch.cuda`` as far as the stamps need it: ``is_initialized``, ``_lazy_init`` (0.1 s once, re-entered as torch's is)."""
import time

_done = False
_initializing = False


def is_initialized() -> bool:
    return _done


def _lazy_init() -> None:
    global _done, _initializing
    if _done or _initializing:  # torch's guard (its _tls.is_initializing)
        return
    _initializing = True
    time.sleep(0.1)
    device_count()  # as torch's own init does: a call back into _lazy_init, which returns at once
    _done, _initializing = True, False


def device_count() -> int:
    _lazy_init()
    return 1
