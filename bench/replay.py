"""Goodput under a replayed preemption trace, at two checkpoint intervals.

The question the seeds' users asked: what would our cluster's interruptions cost
this job, with this checkpoint interval? ``elastic_chaos/faults/traces/spot-3.csv`` (three
EC2 spot interruptions over 26 minutes) is replayed 30x faster onto the default
2-node job (fast preset, replacements on) once per interval; each run's
report.json ``replay`` block gives the goodput over the replay, and its faults
the steps each preemption lost. ``python -m bench --replay --merge`` re-measures
only this block into an existing results.json.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.stats import median_of

TRACE = Path(__file__).resolve().parent.parent / "elastic_chaos" / "faults" / "traces" / "spot-3.csv"
COMPRESS = 30.0
INTERVALS = (10, 50)


def measure(quick: bool, runs: Path, say: Callable[[str], None],
            execute: Callable[..., Any] | None = None, date: str | None = None) -> dict[str, Any]:
    """One replay per checkpoint interval (``quick``: the first only)."""
    if execute is None:
        from elastic_chaos.hypotheses import execute as hypotheses
        execute = hypotheses.execute
    block: dict[str, Any] = {"trace": TRACE.name, "compress": COMPRESS, "date": date, "intervals": {}}
    for every in INTERVALS[:1] if quick else INTERVALS:
        say(f"replay: {TRACE.name} at --compress {COMPRESS:g}, a checkpoint every {every} steps")
        run = execute("replay", {"trace": str(TRACE), "compress": COMPRESS, "checkpoint_every": every,
                                 "rdzv_preset": "fast"},
                      report_dir=runs / f"replay-ckpt-{every}", scenario=f"bench replay ckpt {every}")
        assert run.report is not None, "a closed run has its report"
        result = run.report.result
        summary = result.measured.get("replay")
        replay = summary.to_json() if summary is not None else {}
        lost = [r.lost_steps for r in result.recoveries if r.lost_steps is not None]
        regain = [r.regain_s for r in result.recoveries if r.regain_s is not None]
        block["intervals"][str(every)] = {
            "passed": result.passed, "goodput": replay.get("goodput"), "injected": replay.get("injected"),
            "skipped": replay.get("skipped"), "max_late_s": replay.get("max_late_s"),
            "lost_steps": lost, "regain_s_median": median_of(regain, 1)}
        say(f"replay: every {every} steps: goodput {replay.get('goodput')}, lost steps {lost}")
    return block

