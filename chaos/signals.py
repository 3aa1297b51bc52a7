"""SIGTERM means "stop, cleanly": what a CI runner's timeout or `kill PID` sends.

Python's default for SIGTERM is to die on the spot, without running a single
`finally:` — every etcd, kube-apiserver, moto server and node a run or a test
session started would be left running. Turning SIGTERM into KeyboardInterrupt
lets context managers and fixture teardowns stop them by PID, as on Ctrl-C.
"""
from __future__ import annotations

import signal
import threading
from types import FrameType


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def terminate_cleanly() -> bool:
    """Install the handler if SIGTERM still has its default action and this is the
    main thread (signal handlers can only be set there). Returns whether it did."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False  # somebody (a test runner, a supervisor) already decided
    signal.signal(signal.SIGTERM, _interrupt)
    return True
