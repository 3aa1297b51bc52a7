"""One bounded poll for storagefs (which imports nothing of the toolkit's own waiting helpers)."""
from __future__ import annotations

import time
from collections.abc import Callable


def poll_until(condition: Callable[[], object], *, timeout_s: float, interval_s: float) -> bool:
    """Ask ``condition`` every ``interval_s`` until it is truthy (True) or ``timeout_s`` passed
    (False, after one last ask). Exceptions propagate."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return bool(condition())
        time.sleep(max(0.0, min(interval_s, deadline - time.monotonic())))
    return True
