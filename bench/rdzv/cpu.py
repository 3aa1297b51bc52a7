"""What this machine spent while the rendezvous lab ran: CPU and waits for a CPU, read from /proc.

The harness (bench/rdzv/harness.py) samples these every SAMPLE_S to tell when this machine, not torch, set
the pace (Harness.saturated_s: a process waiting for a core, an interpreter lock, or every core busy), and
the episodes read the store's and the agents' CPU from them. Linux only; a gone process reads as 0.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SAMPLE_S = 0.5
"""How often the harness samples the CPU of the store and of its processes."""
RUN_DELAY = 0.25
"""Seconds per second a process' threads may wait, runnable, for a CPU before this machine sets the pace."""
BUSY_PROCESS = 0.9
"""Share of one core above which a host process' agents wait for its interpreter lock."""
BUSY_MACHINE = 0.9
"""Share of this machine's cores above which everything on it waits for a core."""


def machine_busy_s() -> tuple[float, float]:
    """(busy, total) CPU seconds of this machine so far, every process counted (/proc/stat)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields) - idle) / CLOCK_TICKS, sum(fields) / CLOCK_TICKS


def _schedstat_ns(pid: int, field: int) -> dict[int, int]:
    """Per thread of process ``pid``: field ``field`` of its schedstat (0: nanoseconds on a CPU, 1: nanoseconds
    runnable but waiting for one); empty for a gone process."""
    out: dict[int, int] = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            out[int(tid)] = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[field])
        except (OSError, ValueError, IndexError):
            continue
    return out


def run_delay_s(pid: int) -> float:
    """Seconds the threads of process ``pid`` spent runnable but waiting for a CPU, so far (schedstat);
    0 for a gone one. Threads waiting for Python's interpreter lock sleep: they are not counted."""
    return sum(_schedstat_ns(pid, 1).values()) / 1e9


def threads_on_cpu_ns(pids: Iterable[int]) -> dict[tuple[int, int], int]:
    """Nanoseconds on a CPU so far of every live thread of ``pids``, by (pid, tid): to the nanosecond, where
    /proc/PID/stat counts in clock ticks (10 ms) and an idle agent uses a few ms a second."""
    return {(pid, tid): ns for pid in pids for tid, ns in _schedstat_ns(pid, 0).items()}


def on_cpu_between_s(before: dict[tuple[int, int], int], after: dict[tuple[int, int], int]) -> float:
    """CPU seconds used between two threads_on_cpu_ns() snapshots by the threads alive at the second (a thread
    born in between counts from 0; one that ended in between is not counted: never negative)."""
    return sum(ns - before.get(key, 0) for key, ns in after.items()) / 1e9


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads); 0 for a gone one."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
