"""Pace a step by the time this process could run, not by the time that passed.

The reference trainer's step is mostly a wait that stands in for device compute
(``--step-time``). A plain ``sleep`` completes while the process is stopped
(SIGSTOP, a frozen cgroup), so a node that runs only half of the time would
still step at full rate, which no slow device does: a GPU at half its clock
takes twice as long per kernel. :func:`pace` sleeps in short slices and
counts a slice only for the time the process could have run: a slice that
overran its length by more than ``STALL_S`` was stopped (or frozen)
meanwhile, and counts its planned length only. A node stopped half of the
time therefore paces at half speed; an unstopped one paces as a sleep would
(ordinary scheduling delays below ``STALL_S`` count as time passed).
"""
from __future__ import annotations

import time
from collections.abc import Callable

SLICE_S = 0.005
"""Length of one sleep slice: the resolution of what is counted."""
STALL_S = 0.02
"""A slice that overran by more than this was stopped: its overrun is not counted."""


def pace(seconds: float, *, clock: Callable[[], float] = time.monotonic,
         sleep: Callable[[float], None] = time.sleep) -> float:
    """Block until ``seconds`` of running time have passed (none for ``seconds <= 0``);
    return the wall-clock seconds that took (longer than ``seconds`` when the process
    was stopped meanwhile)."""
    start = clock()
    left = seconds
    while left > 0:
        want = min(SLICE_S, left)
        t0 = clock()
        sleep(want)
        took = clock() - t0
        left -= max(took, want) if took <= want + STALL_S else want  # at least want: always ends
    return clock() - start
