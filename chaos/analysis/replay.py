"""What a replayed preemption trace cost a job: its preemptions as replayed, and its goodput.

A replay (chaos.hypotheses.replay) records its trace and parameters in the
``replay`` phase event and each preemption's fate in a ``fault/replayed``
event. :func:`replay_summary` reads them back into report.json's ``replay``
block, with the answer to the question a replay asks: what this trace costs
this job, with its checkpoint interval, in goodput over the replay:

    goodput = (last step - the step at the replay's start) x s / (end - start)

with *s* the steady step time before the replay (the median gap of rank 0's
steps) and *end* the last step seen by the time the replay was over (the
``replay-over`` phase: its verdict and report.json read the same window; a run
that crashed before it: the last step seen): progress re-trained after a
preemption counts once, downtime and replays lower it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chaos.events import Event, FaultEv, ProgressEv, RunnerEv, last, of, payload_json

REPLAY_OVER = "replay-over"
"""The runner phase that ends a replay's goodput window."""


def replay_summary(events: Sequence[Event], checkpoint_every: int | None = None) -> dict[str, Any] | None:
    """report.json's ``replay`` block from a timeline; None when the run replayed no trace."""
    started = last(events, RunnerEv.PHASE, where=lambda e: e.data.phase == "replay")
    if started is None:
        return None
    rows = [{**payload_json(e.data), "node": e.node} for e in of(events, FaultEv.REPLAYED)]
    injected = [r for r in rows if r.get("outcome") == "injected"]
    late = [abs(float(r["late_s"])) for r in injected if isinstance(r.get("late_s"), (int, float))]
    return {"trace": started.data.trace, "compress": started.data.compress,
            "by": started.data.by, "started_at": round(started.t, 3),
            "preemptions": started.data.preemptions, "injected": len(injected),
            "skipped": len(rows) - len(injected), "max_late_s": round(max(late), 3) if late else None,
            "checkpoint_every": checkpoint_every, "goodput": replay_goodput(events, started.t),
            "rows": rows}


def replay_goodput(events: Sequence[Event], start: float) -> float | None:
    """Goodput from ``start`` to the last step (the module docstring); None without steps
    on both sides of ``start``."""
    over = last(events, RunnerEv.PHASE, where=lambda e: e.data.phase == REPLAY_OVER and e.t > start)
    steps = [e for e in of(events, ProgressEv.STEP, until=over.t if over else None)
             if (e.data.rank or 0) == 0]
    before = [e for e in steps if e.t <= start]
    after = [e for e in steps if e.t > start]
    if len(before) < 3 or not after:
        return None
    gaps = sorted(b.t - a.t for a, b in zip(before, before[1:], strict=False)
                  if a.data.pid == b.data.pid)
    if not gaps:
        return None
    step_s = gaps[len(gaps) // 2]
    progress = max(e.data.step for e in after) - before[-1].data.step
    wall = after[-1].t - start
    return round(max(0.0, min(1.0, progress * step_s / wall)), 4) if wall > 0 else None
