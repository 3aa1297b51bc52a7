"""What a shape script really did, read back for a test: the truth a report is held to.

Every script of tests/shapes/ appends records of what it did (tests/shapes/shape_truth.py) to a
folder elastic-chaos never reads; ``read_truth`` splits them at the fault, and ``check_against_truth``
holds a run's recovery to them (pre-fault step, resumed step, lost progress, world sizes).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_chaos.analysis.recovery import Recovery
from elastic_chaos.runner.run import ChaosRun

SHAPES = Path(__file__).resolve().parent / "shapes"
JOB = {"nodes": "1:2", "last_call_timeout": 3, "timeout_s": 200}


@dataclass(frozen=True)
class Truth:
    """What the scripts recorded, split at the fault."""

    records: tuple[dict[str, Any], ...]
    fault_at: float

    def of(self, ev: str, *, new: bool | None = None) -> list[dict[str, Any]]:
        """Records of kind ``ev`` in time order; ``new``: only of workers started after the
        fault (True) or before it (False)."""
        out = [r for r in self.records if r["ev"] == ev and (new is None or (r["started"] > self.fault_at) == new)]
        return sorted(out, key=lambda r: r["t"])

    @property
    def pre_step(self) -> int:
        """The highest step the workers started before the fault completed."""
        return max(r["step"] for r in self.of("step", new=False))

    @property
    def resumed_from(self) -> int:
        """The step the first workers started after the fault restored."""
        return int(self.of("resumed", new=True)[0]["step"])

    @property
    def world_before(self) -> int:
        return int(self.of("step", new=False)[-1]["world"])

    @property
    def world_after(self) -> int:
        return int(self.of("step", new=True)[0]["world"])

    def saves(self, until: float) -> list[dict[str, Any]]:
        return [r for r in self.of("saved") if r["t"] < until]


def read_truth(folder: Path, fault_at: float) -> Truth:
    records = [json.loads(line) for path in sorted(folder.glob("*.jsonl")) for line in path.read_text().splitlines()]
    assert records, f"no truth was recorded in {folder}: did the script run?"
    return Truth(tuple(records), fault_at)


def shape(name: str, *args: str) -> list[str]:
    return [str(SHAPES / name), *args]


def check_against_truth(run: ChaosRun, truth_dir: Path) -> tuple[Truth, Recovery]:
    """The report's recovery of the one fault equals what the script did: pre-fault step,
    resumed step, lost steps, world size before and after."""
    assert run.report is not None and len(run.report.faults) == 1
    fault = run.report.faults[0]
    truth = read_truth(truth_dir, fault.record.injected_at)
    rec = fault.recovery
    expected = {"pre_step": truth.pre_step, "resumed_from_step": truth.resumed_from,
                "lost_steps": truth.pre_step - truth.resumed_from, "world_size_before": truth.world_before,
                "world_size_after": truth.world_after}
    reported = {k: getattr(rec, k) for k in expected}
    assert reported == expected, f"report {reported} != truth {expected} ({run.report_dir})"
    return truth, rec




MTIME_LAG_S = 0.01
"""How far a file's mtime (the kernel's coarse clock) may trail the fine clock a log sample is read on:
a tick (4 ms at 250 Hz), and more when a tickless idle CPU let the coarse clock fall behind (8 ms seen)."""


def label_is_true(label: int | None, save_t: float, truth_save_t: float, truth: Truth,
                  steps: list[Any], span_s: float = 0.0) -> bool:
    """Whether a save's step label tells the truth: the last step the script printed before it — or, where
    the evidence cannot order a step line and the save (the line's write window, ``written_after`` .. ``t``,
    widened by MTIME_LAG_S, overlaps the save's mtimes ``save_t - span_s`` .. ``save_t``: a folder's files),
    the step on the line's other side: the one before it when the expected line is that close, the one
    after it when the next line is."""
    before = [r for r in truth.of("step") if r["t"] < truth_save_t]
    expected = before[-1]["step"] if before else None
    if label == expected:
        return True
    lines = sorted(steps, key=lambda e: e.t)
    mine = [i for i, e in enumerate(lines) if e.data.step == expected and abs(e.t - before[-1]["t"]) < 1.0] \
        if before else []
    if not mine:
        return False
    i = mine[0]
    previous = lines[i - 1].data.step if i > 0 else None
    following = lines[i + 1] if i + 1 < len(lines) else None
    return (label == previous and _touches(lines[i], save_t, span_s)) or \
        (following is not None and label == following.data.step and _touches(following, save_t, span_s))


def _touches(line: Any, save_t: float, span_s: float) -> bool:
    """Whether a step line's write window, widened by MTIME_LAG_S, overlaps a save's mtimes."""
    low = (line.data.written_after if line.data.written_after is not None else line.t) - MTIME_LAG_S
    return low <= save_t and save_t - span_s <= line.t + MTIME_LAG_S
