"""Hang one worker of a local node: SIGSTOP where it is, SIGCONT if it is still that process.

The worker stays alive (its agent's ``poll()`` sees a running process), its
node and agent too; its peers block in their next collective. A stopped
process does not act on the SIGTERM its agent sends when it restarts the
group: the agent waits its shutdown timeout (torch: 30 s), then SIGKILLs it,
as it would a worker deadlocked in a kernel. Resuming checks the PID's start
time, so a reused PID is never signalled.
"""
from __future__ import annotations

import os
import signal
import threading
import time

from elastic_chaos.errors import InjectionFailed
from elastic_chaos.host import procs
from elastic_chaos.platforms.api import Hit
from elastic_chaos.waiting import eventually

STOP_WAIT_S = 5.0
"""How long a SIGSTOPped worker may take to show stopped."""


class HungWorkers:
    """The workers one run has hung, by PID with their start times."""

    def __init__(self) -> None:
        self._started: dict[int, int | None] = {}
        self._lock = threading.Lock()

    def hang(self, node: str, tag: str, agent_pid: int, local_rank: int) -> Hit:
        """SIGSTOP the worker with ``local_rank`` of the node; InjectionFailed if it has none now."""
        pid = procs.worker_pid(tag, agent_pid, local_rank)
        if pid is None:
            raise InjectionFailed(f"{node} has no running worker with LOCAL_RANK={local_rank} "
                                  "(between restarts, or not started yet)")
        started = procs.start_time(pid)
        at = time.time()
        os.kill(pid, signal.SIGSTOP)
        with self._lock:
            self._started[pid] = started
        # kill() returns before the target is scheduled to stop: the hit is a stopped worker
        if not eventually(lambda: procs.is_stopped(pid) or not procs.is_running(pid, started),
                          timeout_s=STOP_WAIT_S, interval_s=0.01):
            raise InjectionFailed(f"the worker {pid} on {node} was sent SIGSTOP and did not stop within "
                                  f"{STOP_WAIT_S:g}s")
        return Hit(node=node, at=at, action="sigstop-worker", pids=(pid,))

    def resume(self, node: str, pid: int) -> Hit:
        """SIGCONT ``pid`` if it is still the worker this run hung. Idempotent."""
        with self._lock:
            known = pid in self._started
            started = self._started.pop(pid, None)
        at = time.time()
        if not known or not procs.is_running(pid, started):
            return Hit(node=node, at=at, action="nothing-to-resume", pids=(pid,))
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            return Hit(node=node, at=at, action="nothing-to-resume", pids=(pid,))
        return Hit(node=node, at=at, action="sigcont-worker", pids=(pid,))

    def resume_all(self, node_of: dict[int, str] | None = None) -> None:
        """Continue every worker still hung (teardown)."""
        for pid in list(self._started):
            self.resume((node_of or {}).get(pid, ""), pid)
