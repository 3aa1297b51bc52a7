"""The checkpoint volume as a fault domain: what each storage condition costs a save, every crash
point of a save, and the grace period in every phase.

``python -m bench --storage [--quick]`` measures this section alone and merges it into
results.json; ``make bench`` runs it with the rest. Root and /dev/fuse (skipped, saying why,
elsewhere).

- **save cost per condition** (one job, the reference trainer saving every 10 steps): each
  condition is set on the volume for three saves, then cleared; the saves' time as the job
  timed them (checkpoint started -> saved) and as the volume did, the time stalled on storage.
  Plus the storage layer's own cost on large saves (bench/storagefs.py: plain folder vs
  through the mount, 8 MB in quick, 8 and 64 MB in full).
- **crash points**: ``kill-at-save-point`` over every point of the save protocol (each point
  twice, in two runs; not in quick): the resume step against the newest complete checkpoint
  on the volume at each kill. The done criterion: 0 resumes from a partial checkpoint.
- **grace period**: ``grace-period`` per phase x storage condition (full: 4 phases x fast and
  slow volume; quick: skipped): saved in time, grace left, save time, lost steps.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.stats import median_of
from elastic_chaos.analysis.saves import job_saves
from elastic_chaos.analysis.storage import STORAGE
from elastic_chaos.events import CheckpointEv, Event
from elastic_chaos.faults.api import Fault
from elastic_chaos.faults.storage import SlowStorage, StorageHang
from elastic_chaos.hypotheses.execute import execute
from elastic_chaos.platforms.local.platform import LocalOptions
from elastic_chaos.runner.run import ChaosRun
from elastic_chaos.spec import JobSpec, preset
from elastic_chaos.storagefs import unavailable

Say = Callable[[str], None]

CONDITIONS: tuple[tuple[str, Fault | None], ...] = (
    ("fast (the storage layer, no rule)", None),
    ("latency 50 ms per write/fsync/rename/open", SlowStorage(latency_s=0.05, duration_s=None)),
    ("latency 200 ms per write/fsync/rename/open", SlowStorage(latency_s=0.2, duration_s=None)),
    ("latency 1 s per write/fsync/rename/open", SlowStorage(latency_s=1.0, duration_s=None)),
    ("latency 200 ms on every operation", SlowStorage(latency_s=0.2, ops="all", duration_s=None)),
    ("write throughput capped at 10 kB/s", SlowStorage(latency_s=None, throughput_mb_s=0.01, duration_s=None)),
    ("hang 5 s, then resume", StorageHang(duration_s=5.0)),
)
QUICK = (0, 2, 5, 6)
"""The conditions ``--quick`` measures (indexes into CONDITIONS)."""
SAVES_PER_CONDITION = 3


def measure(quick: bool, runs: Path, say: Say) -> dict[str, Any]:
    """Every figure of this section; ``skipped`` with the reason where no mount can be made."""
    reason = unavailable()
    if reason is not None:
        say(f"storage: skipped: {reason}")
        return {"skipped": reason}
    from bench import storagefs
    out: dict[str, Any] = {"load_avg_1m": round(os.getloadavg()[0], 2)}
    say("storage: the layer's own cost on large saves")
    out["layer"] = storagefs.run([8] if quick else [8, 64], 3 if quick else 5)
    say("storage: save cost per condition")
    out["save_cost"] = save_cost(runs, say, [CONDITIONS[i] for i in QUICK] if quick else list(CONDITIONS))
    if quick:   # make bench-quick stays short: the crash points and the grace grid are the full bench's
        return out
    say("storage: every crash point of a save")
    out["crash_points"] = crash_points(runs, say, runs_per_point=2)
    say("storage: the grace period in every phase")
    out["grace"] = grace_grid(runs, say)
    return out


def save_cost(runs: Path, say: Say, conditions: list[tuple[str, Fault | None]]) -> list[dict[str, Any]]:
    job = preset("fast").apply(JobSpec(nodes="1:2", checkpoint_every=10, storage_layer=True, max_restarts=10))
    rows: list[dict[str, Any]] = []
    with ChaosRun(runs / "storage-save-cost", scenario="bench storage save cost",
                  options=LocalOptions()) as run:
        run.start(job)
        run.wait_for_step(25, timeout=300)
        for name, fault in conditions:
            began = time.time()
            record = run.inject(fault) if fault is not None else None
            run.wait_for(f"{SAVES_PER_CONDITION} saves under {name}", _saves_after(run, began), timeout=300)
            if record is not None:
                run.revert(record)
            rows.append(_row(run, name, began))
            say(f"  {name}: save p50 {rows[-1]['save_p50_s']} s, stalled {rows[-1]['stalled_s']} s")
    return rows


def _saves_after(run: ChaosRun, began: float) -> Callable[[Event], bool]:
    """Matches the save that makes SAVES_PER_CONDITION saves since ``began``."""
    def enough(e: Event) -> bool:
        return e.type == CheckpointEv.SAVED and len(run.timeline.select(CheckpointEv.SAVED, after=began)) \
            >= SAVES_PER_CONDITION
    return enough


def _row(run: ChaosRun, name: str, began: float) -> dict[str, Any]:
    events = run.timeline.events()
    saves = [s.duration_s for s in job_saves(events) if s.start > began and s.duration_s is not None]
    files = [e for e in run.timeline.select(CheckpointEv.STORAGE_SAVE, after=began) if not e.data.error]
    stalls = run.timeline.select(CheckpointEv.STORAGE_STALL, after=began)
    held = sum(float(e.data.stalled_s or 0.0) for e in files) + sum(float(e.data.stalled_s or 0.0) for e in stalls)
    return {"condition": name, "saves": len(saves),
            "save_p50_s": median_of(saves),
            "save_max_s": round(max(saves), 3) if saves else None,
            "volume_p50_s": median_of(float(e.data.duration_s or 0) for e in files),
            "stalled_s": round(held, 3)}


def crash_points(runs: Path, say: Say, runs_per_point: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for i in range(runs_per_point):
        run = execute("kill-at-save-point", {"checkpoint_every": 20, "steady_steps": 30, "points": "all",
                                             "timeout_s": 240.0},
                      report_dir=runs / f"storage-crash-points-{i + 1}", scenario="bench kill-at-save-point")
        checks = run.verdict.checks if run.verdict is not None else []
        for record in run.faults:
            point = str(record.detail.get("point"))
            resumed = next((c for c in checks if c.name == "newest-complete" and c.reason.startswith(point + ":")),
                           None)
            rec = run.recovery(record)
            rows.append({"run": i + 1, "point": point, "node": record.target,
                         "resumed_from_step": rec.resumed_from_step, "lost_steps": rec.lost_steps,
                         "regain_s": None if rec.regain_s is None else round(float(rec.regain_s), 2),
                         "newest_complete": bool(resumed and resumed.ok), "reason": resumed.reason if resumed else ""})
            say(f"  {point}: resumed {rec.resumed_from_step}: {'ok' if rows[-1]['newest_complete'] else 'BAD'}")
        rows_failed = [c.reason for c in checks if c.ok is False]
        if rows_failed:
            say(f"  run {i + 1} failed checks: {'; '.join(rows_failed)}")
    partial = sum(not r["newest_complete"] for r in rows)
    return {"kills": len(rows), "resumed_from_newest_complete": len(rows) - partial, "resumed_from_partial": partial,
            "rows": rows}


PHASES = ("before-first-step", "steady", "during-save", "during-rendezvous")
STORAGE_CONDITIONS: tuple[tuple[str, float | None], ...] = (("fast", None), ("slow 0.5 s/op", 0.5))


def grace_grid(runs: Path, say: Say) -> list[dict[str, Any]]:
    rows = []
    for phase in PHASES:
        for label, latency in STORAGE_CONDITIONS:
            values: dict[str, Any] = {"phase": phase, "checkpoint_every": 20, "steady_steps": 30, "grace_s": 10.0,
                                      "timeout_s": 240.0}
            if latency:
                values["save_latency_s"] = latency
            run = execute("grace-period", values, report_dir=runs / f"storage-grace-{phase}-{label.split()[0]}",
                          scenario=f"bench grace-period {phase} {label}")
            spot = next((f for f in run.result().faults if f.record.fault == "spot-interruption"), None)
            cost = spot.group(STORAGE) if spot is not None else None
            check = next((c for c in (run.verdict.checks if run.verdict else []) if c.name == "saved-in-grace"), None)
            rows.append({"phase": phase, "storage": label, "grace_s": cost.grace_s if cost else None,
                         "saved_in_time": cost.saved_in_time if cost else None,
                         "expected": "n/a" if check is not None and check.ok is None else "saved",
                         "last_save_s": cost.last_save_s if cost else None,
                         "grace_left_s": cost.grace_left_s if cost else None,
                         "lost_steps": spot.recovery.lost_steps if spot else None,
                         "passed": bool(run.verdict and run.verdict.passed),
                         "reason": check.reason if check else ""})
            say(f"  {phase} x {label}: saved in time {rows[-1]['saved_in_time']}, last save "
                f"{rows[-1]['last_save_s']} s, grace left {rows[-1]['grace_left_s']} s, lost "
                f"{rows[-1]['lost_steps']} steps")
    return rows

