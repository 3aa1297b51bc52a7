"""Slow a node down: a duty cycle of stop and continue, whatever stops the node.

A node at 1/factor of its speed runs 1/factor of every cycle and is stopped for
the rest. How it is stopped is the platform's: the local platform freezes the
node's cgroup or signals its processes (:mod:`elastic_chaos.platforms.local.slow`), the
local Kubernetes cluster freezes the machine's freezer cgroup
(:mod:`elastic_chaos.platforms.kubernetes.machines`). This module keeps the schedule.
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Protocol

from elastic_chaos.errors import InjectionFailed, PlatformError
from elastic_chaos.platforms.api import Hit

log = logging.getLogger(__name__)


class Switch(Protocol):
    """Stops and continues every process of one node."""

    how: str

    def stop(self) -> None: ...

    def cont(self) -> None: ...


class FreezerFileSwitch:
    """Writes a cgroup freezer file: the kernel stops (and continues) the exact process set at
    once. No wait for its confirmation: a cycle is short."""

    def __init__(self, path: Path, *, stop: str, cont: str, how: str) -> None:
        self._file, self._stop, self._cont, self.how = path, stop, cont, how

    def stop(self) -> None:
        self._file.write_text(self._stop)

    def cont(self) -> None:
        self._file.write_text(self._cont)


class DutyCycle:
    """A thread that stops a node for ``1 - 1/factor`` of every ``period_s`` until ``halt()``.

    The cycles keep to a fixed schedule from the start (no drift from the time a stop
    or a continue takes). A node that is gone ends the cycle (``ended`` says why); the
    node is always left running."""

    def __init__(self, node: str, factor: float, period_s: float, switch: Switch) -> None:
        self.node, self.factor, self.period_s, self.switch = node, factor, period_s, switch
        self.cycles = 0
        self.started_at = 0.0
        self.ended: str | None = None
        self.error: BaseException | None = None
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"slow-{node}", daemon=True)

    def start(self) -> DutyCycle:
        self.started_at = time.time()
        self._thread.start()
        return self

    def halt(self, timeout_s: float = 10.0) -> None:
        """End the cycle and leave the node running; blocks until the thread ended.
        Idempotent. Raises PlatformError if the thread failed or does not end."""
        self._halt.set()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise PlatformError(f"the duty cycle of {self.node} did not stop within {timeout_s:g}s")
        if self.error is not None:
            raise PlatformError(f"the duty cycle of {self.node} failed: {self.error}") from self.error

    def _run(self) -> None:
        run_s = self.period_s / self.factor
        begin = time.monotonic()
        try:
            while True:
                at = begin + self.cycles * self.period_s
                if self._halt.wait(max(0.0, at + run_s - time.monotonic())):
                    return
                self.switch.stop()
                self.cycles += 1
                stopped = self._halt.wait(max(0.0, at + self.period_s - time.monotonic()))
                self.switch.cont()
                if stopped:
                    return
        except (FileNotFoundError, ProcessLookupError) as exc:
            self.ended = f"the node is gone ({exc})"
        except BaseException as exc:  # surfaced by halt(): never a silent thread death
            log.exception("duty cycle of %s failed", self.node)
            self.error = exc
        finally:
            self._leave_running()

    def _leave_running(self) -> None:
        try:
            self.switch.cont()
        except (OSError, ProcessLookupError):
            pass  # gone: nothing left stopped


class Slowdowns:
    """The duty cycles of one run's nodes, by node."""

    def __init__(self) -> None:
        self._cycles: dict[str, DutyCycle] = {}
        self._lock = threading.Lock()

    def start(self, node: str, factor: float, period_s: float, switch: Switch) -> Hit:
        """Start slowing ``node``; InjectionFailed if it is slowed already."""
        with self._lock:
            if node in self._cycles:
                raise InjectionFailed(f"{node} is already slowed down; restore it first")
            cycle = self._cycles[node] = DutyCycle(node, factor, period_s, switch).start()
        return Hit(node=node, at=cycle.started_at, action=switch.how,
                   detail={"how": switch.how, "run_s": round(period_s / factor, 4)})

    def restore(self, node: str) -> Hit:
        """Stop slowing ``node``, leaving it running. Idempotent."""
        with self._lock:
            cycle = self._cycles.pop(node, None)
        if cycle is None:
            return Hit(node=node, at=time.time(), action="nothing-to-restore")
        cycle.halt()
        detail: dict[str, object] = {"cycles": cycle.cycles}
        if cycle.ended:
            detail["ended"] = cycle.ended
        return Hit(node=node, at=time.time(), action="full-speed", detail=detail)

    def restore_all(self) -> list[str]:
        """Restore every slowed node; returns what could not be restored."""
        errors = []
        for node in list(self._cycles):
            try:
                self.restore(node)
            except PlatformError as exc:
                errors.append(str(exc))
        return errors
