"""The job's pace and its goodput, measured once: every report, the replay's cost and the advice read these.

- ``step_time_s``: the steady time of one step (in the job's unit: a script's epoch) — the median
  gap between two consecutive steps (n, n+1) of one worker process, before the run's first fault
  when there are enough of them; ``at_size`` measures it at one world size only, the one a
  figure applies to (a step after a shrink takes longer than before it).
- ``goodput``: the share of a window's wall time spent on training that counted: progress x the
  steady step time / wall time. Progress is the highest step reached in the window minus the
  highest step before it (the first step counts from its own start), so a step trained twice
  counts once and downtime lowers it (docs/REPORTS.md, "Goodput").
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from elastic_chaos.events import Event, FaultEv, ProgressEv, first, of

MIN_GAPS = 3
"""Gaps needed before the first fault for them alone to set the steady step time."""


def _series(events: Sequence[Event]) -> list[list[Event]]:
    """Each worker's steps, in time order (a script's regex steps carry no pid: one series per node)."""
    by_proc: dict[tuple[Any, ...], list[Event]] = {}
    for e in of(events, ProgressEv.STEP):
        by_proc.setdefault((e.node, e.data.rank or 0, e.data.pid), []).append(e)
    return list(by_proc.values())


def _gaps(events: Sequence[Event], *, until: float | None = None, world_size: int | None = None,
          after: float | None = None) -> list[float]:
    out = []
    for steps in _series(events):
        pts = [e for e in steps if (until is None or e.t <= until) and (after is None or e.t > after)]
        out += [b.t - a.t for a, b in zip(pts, pts[1:], strict=False) if b.data.step == a.data.step + 1
                and (world_size is None or a.data.world_size == b.data.world_size == world_size)]
    return out


def step_time_s(events: Sequence[Event]) -> float | None:
    """The job's steady seconds per step (per unit): the median gap between consecutive steps of
    one process before the first fault (all of them, when fewer than MIN_GAPS came before it)."""
    fault = first(events, FaultEv.INJECTED)
    chosen = _gaps(events, until=fault.t) if fault is not None else []
    if len(chosen) < MIN_GAPS:
        chosen = _gaps(events)
    return statistics.median(chosen) if chosen else None


def step_time_at(events: Sequence[Event], world_size: int, *, after: float | None = None) -> float | None:
    """Seconds per step at ``world_size`` (after ``after``): the pace a figure about that world uses."""
    gaps = _gaps(events, world_size=world_size, after=after)
    return statistics.median(gaps) if gaps else None


def goodput(events: Sequence[Event], *, start: float | None = None, end: float | None = None) -> float | None:
    """Progress x the steady step time / wall time, from ``start`` (None: the first step's own start)
    to the later of the last step and ``end`` (when the evidence ends: a stall until then counts as
    lost). None without two steps, or (with ``start``) without steps on both sides of it."""
    steps = of(events, ProgressEv.STEP, until=end)
    step_s = step_time_s(events)
    if len(steps) < 2 or not step_s:
        return None
    if start is None:
        base, began, window = min(e.data.step for e in steps) - 1, steps[0].t - step_s, steps
    else:
        before, window = [e for e in steps if e.t <= start], [e for e in steps if e.t > start]
        if not before or not window:
            return None
        base, began = max(e.data.step for e in before), start
    last_t = max(window[-1].t, end) if end is not None else window[-1].t
    wall = last_t - began
    progress = max(e.data.step for e in window) - base
    return max(0.0, min(1.0, progress * step_s / wall)) if wall > 0 else None
