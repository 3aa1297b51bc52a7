"""Sharded saves: what a DCP save costs the job, synchronous against asynchronous, the file format beside them.

``python -m bench --dcp [--quick]`` measures this section alone and merges it into results.json; ``make bench``
runs it with the rest. No root needed: the local platform.

One job per save mode (the reference trainer on gloo, 2 nodes of one rank each, steps unpadded so a save shows
in the step that holds it, a save every CHECKPOINT_EVERY steps), run until SAVES periodic saves were made after
the warm-up. Per mode:

- **save** (the job's own ``checkpoint/started`` -> ``checkpoint/saved``, elastic_chaos.analysis.saves): how
  long a save took until it was durable. An async save is finished (its pointer written, ``saved`` said) at
  the first step boundary after its future is done, so its time is counted in steps, not to the millisecond.
- **stall**: what the job waited for it. Rank 0's step times (one ``progress/step`` to the next); a save of
  step N is made after step N is reported, so the step N -> N+1 holds it. The stall is the median of those
  steps less the median of every other step (the machine's own step time), and the longest such step.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.stats import median_of
from elastic_chaos.analysis.saves import job_saves
from elastic_chaos.events import Event, ProgressEv, of
from elastic_chaos.platforms.local.platform import LocalOptions
from elastic_chaos.runner.run import ChaosRun
from elastic_chaos.spec import CheckpointFormat, JobSpec

Say = Callable[[str], None]

CHECKPOINT_EVERY = 10
WARMUP_STEPS = 20
"""Steps left out at the start (process groups, first allocations): neither saves nor step times from them."""
SAVES = 30
QUICK_SAVES = 6
MODES: tuple[tuple[str, CheckpointFormat, tuple[str, ...]], ...] = (
    ("dcp sync", CheckpointFormat.DCP, ()),
    ("dcp async", CheckpointFormat.DCP, ("--async-save",)),
    ("file (torch.save, rank 0)", CheckpointFormat.FILE, ()),
)


def measure(quick: bool, runs: Path, say: Say) -> dict[str, Any]:
    """Every figure of this section (blocks for the three jobs, a few minutes)."""
    saves = QUICK_SAVES if quick else SAVES
    out: dict[str, Any] = {"load_avg_1m": round(os.getloadavg()[0], 2), "nodes": 2,
                           "checkpoint_every": CHECKPOINT_EVERY, "saves_asked": saves, "modes": []}
    for label, fmt, extra in MODES:
        say(f"dcp: {label}, {saves} saves")
        row = {"mode": label, **mode_run(runs, label, fmt, extra, saves)}
        out["modes"].append(row)
        say(f"  {label}: save p50 {row['save_p50_s']} s, step p50 {row['step_p50_s']} s, stall p50 "
            f"{row['stall_p50_s']} s (max step holding a save {row['stall_step_max_s']} s)")
    return out


def mode_run(runs: Path, label: str, fmt: CheckpointFormat, extra: tuple[str, ...], saves: int) -> dict[str, Any]:
    job = JobSpec(nodes="2:2", checkpoint_every=CHECKPOINT_EVERY, step_time=0.0, max_restarts=3,
                  checkpoint_format=fmt, trainer_args=extra)
    last = WARMUP_STEPS + CHECKPOINT_EVERY * saves + 1   # the step after the last save: it holds that save
    folder = runs / f"dcp-{label.split(' (')[0].replace(' ', '-')}"
    with ChaosRun(folder, scenario=f"bench dcp {label}", options=LocalOptions()) as run:
        run.start(job)
        run.wait_for_step(last + CHECKPOINT_EVERY, timeout=600)   # time for the last async save to finish
        events = run.timeline.events()
    return figures(events, first=WARMUP_STEPS, last=last)


def figures(events: Sequence[Event], *, first: int, last: int) -> dict[str, Any]:
    """Save time and stall from a run's events: periodic saves of steps in (first, last), rank 0's steps."""
    times: dict[int, float] = {}
    restarts = 0
    for e in of(events, ProgressEv.STEP):
        if e.data.rank == 0:
            restarts = max(restarts, e.data.restart_count or 0)
            times.setdefault(e.data.step, e.t)   # a step made again after a restart: the first time counts
    saved = [s for s in job_saves(events) if s.reason in (None, "periodic") and s.step is not None
             and first < s.step < last]
    holding = {s.step + 1 for s in saved if s.step is not None}
    took = {n: times[n] - times[n - 1] for n in range(first + 1, last + 1) if n in times and n - 1 in times}
    with_save = [t for n, t in took.items() if n in holding]
    plain = [t for n, t in took.items() if n not in holding]
    step_p50, save_step_p50 = median_of(plain, 4), median_of(with_save, 4)
    return {"saves": len(saved), "unfinished": sum(s.duration_s is None for s in saved),
            "save_p50_s": median_of(s.duration_s for s in saved),
            "save_max_s": median_of([max((s.duration_s for s in saved if s.duration_s is not None), default=None)]),
            "step_p50_s": step_p50, "save_step_p50_s": save_step_p50,
            "stall_p50_s": None if step_p50 is None or save_step_p50 is None else round(save_step_p50 - step_p50, 4),
            "stall_step_max_s": median_of([max(with_save, default=None)], 4),
            "steps_timed": len(plain), "restarts": restarts}
