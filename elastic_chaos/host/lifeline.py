"""Children that die with the runner: the kernel's death signal, set before they exec.

A runner killed with SIGKILL runs no ``finally:``. The kernel can still act for
it: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` in a child makes the kernel kill that
child when its parent goes. Three catches make this a module of its own:

- the signal must be set between fork and exec. Python's ``preexec_fn`` is not
  safe in a threaded process, and etcd is a Go binary that cannot set it
  itself, so a tiny wrapper (this interpreter, isolated, no site) sets it and
  execs the real command (the PID stays the command's);
- the wrapper checks that its parent is still the runner: a runner that died
  between fork and prctl would never send the signal;
- the "parent" is the *thread* that forked. A child started from a short-lived
  thread (a fault's revert timer restarting etcd) would be killed when that
  thread ends, so every tied child is started from one long-lived thread.

The signal reaches the direct child only (an agent, etcd). What they spawn
(workers, a forking etcd's children) is stopped by the run's watchdog
(:mod:`elastic_chaos.host.watchdog`) and, if that is gone too, reaped by the
next run or ``elastic-chaos reap`` (:mod:`elastic_chaos.host.registry`).
"""
from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

# argv: [python, -I, -S, -c, WRAPPER, parent_pid, command...]
WRAPPER = """\
import ctypes, os, sys
if ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0) != 0:
    sys.exit("elastic-chaos lifeline: prctl(PR_SET_PDEATHSIG) failed: " + os.strerror(ctypes.get_errno()))
if os.getppid() != int(sys.argv[1]):
    os._exit(137)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as e:
    sys.exit(f"elastic-chaos lifeline: cannot run {sys.argv[2]}: {e.strerror}")
"""


def tied(cmd: list[str]) -> list[str]:
    """``cmd`` wrapped so that it is SIGKILLed when this process dies; start it with
    :func:`popen` (from any other thread, the signal would follow that thread)."""
    return [sys.executable, "-I", "-S", "-c", WRAPPER, str(os.getpid()), *cmd]


def popen(cmd: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(cmd, **kwargs)`` for a child that dies with this process (SIGKILL
    from the kernel), started from the long-lived spawner thread. Blocks until started;
    raises what Popen raises."""
    argv = tied(cmd)
    return _spawner.call(lambda: subprocess.Popen(argv, **kwargs))


class _Spawner:
    """One daemon thread that lives as long as the process and runs what is handed to it."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def call(self, fn: Callable[[], T]) -> T:
        if threading.current_thread() is self._thread:
            return fn()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="lifeline-spawner", daemon=True)
                self._thread.start()
        done: Future[T] = Future()
        self._jobs.put((fn, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            fn, done = self._jobs.get()
            try:
                done.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller, who raises it
                done.set_exception(exc)


_spawner = _Spawner()
