"""What every rendering of a run takes: its typed result, its evidence, and what is missing.

A ``RunReport`` is made once per run: in memory by ChaosRun when the run closes
(``complete``: it wrote report.json), or by elastic_chaos.reporting.load from a folder for
``elastic-chaos report DIR`` and ``audit`` (a crashed run's result rebuilt from its
timeline, and said so in ``missing``). The renderings (report.html, summary.md,
timeline.png, metrics.prom, the terminal table) take it as it is.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic_chaos.analysis.result import TIMELINE, FaultResult, RunResult
from elastic_chaos.events import Event, RunnerEv, of


@dataclass(frozen=True)
class RunReport:
    """One run as the reports show it (see the module docstring)."""

    folder: Path
    result: RunResult
    events: list[Event[Any]] = field(default_factory=list)
    node_logs: dict[str, Path] = field(default_factory=dict)
    """Node name -> its log file (those that exist)."""
    missing: tuple[str, ...] = ()
    """What could not be known, in sentences a reader understands."""
    complete: bool = True
    """The run finished and wrote its report.json (False: rebuilt from what the folder holds)."""

    @property
    def faults(self) -> tuple[FaultResult, ...]:
        return self.result.faults

    @property
    def passed(self) -> bool | None:
        """The verdict: True, False, or None when the run never reached one."""
        return None if self.result.verdict is None else self.result.verdict.passed

    @property
    def reasons(self) -> list[str]:
        return self.result.verdict.reasons if self.result.verdict else ["no verdict: the run never finished"]

    @property
    def t0(self) -> float:
        """The run's time origin: its start, else its first event."""
        candidates = [t for t in (self.result.started_at, self.events[0].t if self.events else None) if t is not None]
        return min(candidates) if candidates else 0.0

    @property
    def t_end(self) -> float:
        candidates = [t for t in (self.result.finished_at, self.events[-1].t if self.events else None)
                      if t is not None]
        return max(candidates) if candidates else self.t0

    @property
    def title(self) -> str:
        return self.result.scenario or self.folder.name

    @property
    def platform(self) -> str:
        return self.result.platform or "unknown"


def missing_in(result: RunResult, events: Sequence[Event], *, have_timeline: bool = True) -> list[str]:
    """What a report must say it lacks, whatever made it: an interrupted timeline, no fault."""
    out: list[str] = [f"the run stopped: no space left on device at {e.data.path}: "
                      f"{'unknown' if e.data.free_bytes is None else f'{e.data.free_bytes:,}'} bytes free"
                      + (f" ({e.data.why})" if e.data.why else "") for e in of(events, RunnerEv.DISK_FULL)]
    if have_timeline:
        if not events:
            out.append(f"{TIMELINE} holds no events")
        else:
            phases = of(events, RunnerEv.PHASE)
            if not any(e.data.phase == "finished" for e in phases):
                last = phases[-1].data.phase if phases else "none"
                out.append(f"the timeline ends without the 'finished' phase (last phase: {last}): "
                           "the run was interrupted, events after that are lost")
    if not result.faults:
        out.append("no fault was injected in this run: nothing to measure")
    return out
