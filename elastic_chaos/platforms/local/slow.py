"""Slow a local node down: the switches a duty cycle (elastic_chaos.platforms.slowdown) stops the node's processes with.

A node at 1/factor of its speed runs 1/factor of every cycle and is stopped for
the rest. As root the node's cgroup does it (``cgroup.freeze``: the kernel
stops the node's exact process set at once, escaped sessions included);
without root every tagged process gets SIGSTOP and SIGCONT
(:mod:`elastic_chaos.host.procs`). Whatever the node does advances 1/factor
as fast: its compute, its messages, and the reference trainer's wait for its
stand-in device (elastic_chaos.trainer.pacing counts only the time the process could run).

Why not a CPU quota (cgroup v2 ``cpu.max``): a quota slows only work that uses
the CPU. A step that waits for a device (or, in the reference trainer, for
its stand-in) is untouched by it, so a 50% quota does not halve such a node.
And where the hierarchy is hybrid the cpu controller is often bound to cgroup
v1 (it is on the machines this was built on), so ``cpu.max`` does not exist.
The stop of a cycle also stops the node's agent; that is harmless for cycles
far shorter than its 5 s heartbeat.
"""
from __future__ import annotations

import os
import signal
import time

from elastic_chaos.host import procs
from elastic_chaos.host.cgroup import NodeCgroups
from elastic_chaos.platforms.slowdown import FreezerFileSwitch


class CgroupSwitch(FreezerFileSwitch):
    """Freeze and thaw the node's cgroup v2 (``cgroup.freeze``)."""

    def __init__(self, cgroups: NodeCgroups, node: str) -> None:
        super().__init__(cgroups.path(node) / "cgroup.freeze", stop="1", cont="0", how="cgroup.freeze duty cycle")


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
