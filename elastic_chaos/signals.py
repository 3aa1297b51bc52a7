"""Ctrl-C and SIGTERM mean "stop, cleanly", and pressing Ctrl-C again must not undo that.

SIGTERM (a CI runner's timeout, ``kill PID``) by default kills Python on the spot,
without a single ``finally:``: every etcd, kube-apiserver, moto server and node a
run or a test session started would be left running. Turning it into
KeyboardInterrupt lets context managers and fixture teardowns stop them by PID,
as on Ctrl-C.

A second Ctrl-C, pressed because teardown seemed slow, used to raise inside that
teardown: etcd orphaned, cgroups left, no report.json. So once stopping has
begun, further SIGINT/SIGTERM no longer raise: the second says stopping is under
way, the third force-exits (status 130) after saying what may still be running.
Teardown code runs inside :func:`deferred`, which gives the same protection
where the first signal arrives during teardown (a pytest session, a library
user): it is held until the teardown is done, then raised.

What a run starts is tracked (:func:`track`), so the last word of an interrupted
command ("everything started was stopped") is checked (:func:`leftovers`), not
assumed.
"""
from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

FORCED_EXIT = 130
"""Exit status of a forced exit (the third signal): 128 + SIGINT, as a shell reports Ctrl-C."""

Check = Callable[[], list[str]]
"""Returns what of something started is still running, in words ([] when nothing)."""


@dataclass
class _State:
    stopping: bool = False
    """A first signal arrived: everything is being stopped."""
    pending: bool = False
    """That first signal arrived inside deferred(): raise it when the teardown is done."""
    repeats: int = 0
    """Signals after the first."""
    depth: int = 0
    """How many deferred() blocks are open."""


_state = _State()
_checks: list[Check] = []
_checks_lock = threading.Lock()


def _say(text: str) -> None:
    try:
        os.write(2, f"\nelastic-chaos: {text}\n".encode())
    except OSError:
        pass


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if not _state.stopping:
        _state.stopping = True
        if _state.depth == 0:
            raise KeyboardInterrupt(f"signal {signum}")
        _state.pending = True
        _say("stopping: the teardown under way finishes first (report.json comes last)")
        return
    _state.repeats += 1
    if _state.repeats == 1:
        _say("still stopping everything this run started (report.json comes last); press Ctrl-C "
             "once more to force-exit now, which may leave processes running")
        return
    left = leftovers()
    _say("forced exit; " + ("may still be running: " + "; ".join(left) + ". `elastic-chaos reap` stops "
                            "what a killed run left" if left else "nothing this run started is running"))
    os._exit(FORCED_EXIT)


def install() -> bool:
    """For a command: SIGINT and SIGTERM raise KeyboardInterrupt once, then are deferred
    (see the module docstring). A signal the command was started with ignored (a
    background job of a shell script ignores SIGINT) stays ignored. Main thread only;
    returns whether it installed."""
    if threading.current_thread() is not threading.main_thread():
        return False
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _on_signal)
    return True


def terminate_cleanly() -> bool:
    """SIGTERM as KeyboardInterrupt (then deferred), if SIGTERM still has its default action
    and this is the main thread (signal handlers can only be set there). Returns whether it did."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False  # somebody (a test runner, a supervisor) already decided
    signal.signal(signal.SIGTERM, _on_signal)
    return True


@contextmanager
def deferred() -> Iterator[None]:
    """Run the block (a teardown) without SIGINT/SIGTERM interrupting it; a first signal that
    arrives inside is raised as KeyboardInterrupt once the outermost block is done. Leaves
    handlers someone else installed alone; a no-op outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        current = signal.getsignal(sig)
        if current is signal.default_int_handler or current is signal.SIG_DFL:
            saved[sig] = current
            signal.signal(sig, _on_signal)
    _state.depth += 1
    try:
        yield
    finally:
        _state.depth -= 1
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        if _state.depth == 0 and _state.pending:
            _state.pending = False
            raise KeyboardInterrupt("a signal arrived during teardown")


def track(check: Check) -> None:
    """Remember ``check`` for :func:`leftovers` (a platform, for what it started)."""
    with _checks_lock:
        _checks.append(check)


def untrack(check: Check) -> None:
    """Forget ``check`` (what it watched was stopped, and that was verified). Idempotent."""
    with _checks_lock:
        if check in _checks:
            _checks.remove(check)


def leftovers() -> list[str]:
    """What of everything tracked is still running, in words; [] when nothing is."""
    with _checks_lock:
        checks = list(_checks)
    found: list[str] = []
    for check in checks:
        try:
            found += check()
        except Exception as exc:  # noqa: BLE001 - the answer must not be "nothing" by accident
            found.append(f"(could not check: {type(exc).__name__}: {exc})")
    return found
