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

from chaos.analysis.recovery import Recovery
from chaos.runner.run import ChaosRun

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


