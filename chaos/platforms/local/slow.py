"""Slow a local node down: a duty cycle of stop and continue over the node's processes.

A node at 1/factor of its speed runs 1/factor of every cycle and is stopped for
the rest. As root the node's cgroup does it (``cgroup.freeze``: the kernel
stops the node's exact process set at once, escaped sessions included);
without root every tagged process gets SIGSTOP and SIGCONT
(:mod:`chaos.platforms.local.procs`). Whatever the node does advances 1/factor
as fast: its compute, its messages, and the reference trainer's wait for its
stand-in device (trainer.pacing counts only the time the process could run).

Why not a CPU quota (cgroup v2 ``cpu.max``): a quota slows only work that uses
the CPU. A step that waits for a device (or, in the reference trainer, for
its stand-in) is untouched by it, so a 50% quota does not halve such a node.
And where the hierarchy is hybrid the cpu controller is often bound to cgroup
v1 (it is on the machines this was built on), so ``cpu.max`` does not exist.
The stop of a cycle also stops the node's agent; that is harmless for cycles
far shorter than its 5 s heartbeat.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Protocol

from chaos.errors import InjectionFailed, PlatformError
from chaos.platforms.api import Hit
from chaos.platforms.local import procs
from chaos.platforms.local.cgroup import NodeCgroups

log = logging.getLogger(__name__)


class Switch(Protocol):
    """Stops and continues every process of one node."""

    how: str

    def stop(self) -> None: ...

    def cont(self) -> None: ...


class CgroupSwitch:
    """Freeze and thaw the node's cgroup (no wait for the kernel's confirmation: a cycle is short)."""

    how = "cgroup.freeze duty cycle"

    def __init__(self, cgroups: NodeCgroups, node: str) -> None:
        self._file = cgroups.path(node) / "cgroup.freeze"

    def stop(self) -> None:
        self._file.write_text("1")

    def cont(self) -> None:
        self._file.write_text("0")


class SignalSwitch:
    """SIGSTOP and SIGCONT every tagged process of the node (the set is rescanned each second,
    so a restarted worker is caught too)."""

    how = "sigstop/sigcont duty cycle"

    def __init__(self, tag: str, rescan_s: float = 1.0) -> None:
        self.tag, self.rescan_s = tag, rescan_s
        self._pids: set[int] = set()
        self._scanned = 0.0

    def stop(self) -> None:
        if time.monotonic() - self._scanned >= self.rescan_s:
            self._pids, self._scanned = procs.tagged_pids(self.tag), time.monotonic()
        if not self._pids:
            raise ProcessLookupError(f"no live process tagged {self.tag}")
        _signal(self._pids, signal.SIGSTOP)

    def cont(self) -> None:
        _signal(self._pids, signal.SIGCONT)


def _signal(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


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
