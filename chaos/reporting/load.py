"""Read a report folder as it is, however the run ended.

A finished run has report.json, timeline.jsonl and node logs. A run that
crashed may have only part of a timeline (the last line cut mid-write), no
report.json, or logs of some nodes only. ``load_run`` takes whatever is there,
recomputes the fault metrics from the timeline when report.json is absent,
reads what it has into the typed result (chaos.reporting.result.RunResult) and
lists in ``missing`` what could not be known, in sentences a reader
understands. Nothing is guessed. ``read_result`` reads a finished run's
report.json alone.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.analysis import recovery as analysis
from chaos.errors import SpecError
from chaos.events import Event, FaultEv, RunnerEv, first, of, read_timeline
from chaos.faults.api import FaultRecord
from chaos.reporting.result import REPORT, SCHEMA_VERSION, TIMELINE, FaultResult, RunResult, placement_of
from chaos.reporting.schema import check_report


@dataclass(frozen=True)
class FaultView:
    """One fault as the reports show it: report.json's entry, metrics included."""

    kind: str
    target: str | None
    injected_at: float
    metrics: dict[str, Any]
    observed: bool = False
    """Seen by a passive watch (timed at the lost node's last heartbeat), not injected."""

    @property
    def phases(self) -> dict[str, float | None]:
        """The phases that apply to this recovery, in order (None: not observed)."""
        raw = self.metrics.get("phases") or {}
        skip = self.recovery.not_applicable
        return {p: _num(raw.get(p)) for p in analysis.PHASES if p not in skip}

    @property
    def recovery(self) -> analysis.Recovery:
        """The metrics, typed (what is absent or not a number reads as not observed)."""
        return analysis.Recovery.from_json(self.kind, self.target, self.injected_at, self.metrics)


@dataclass
class RunData:
    """Everything one report folder holds, and what it lacks."""

    folder: Path
    report: dict[str, Any]
    events: list[Event]
    faults: list[FaultView]
    node_logs: dict[str, Path]
    missing: list[str] = field(default_factory=list)
    has_report_json: bool = True
    bad_lines: int = 0
    result: RunResult | None = None
    """report.json (or, without one, what the timeline shows) as the typed result."""

    @property
    def passed(self) -> bool | None:
        """The verdict: True, False, or None when the run never reached one."""
        verdict = self.report.get("verdict") or {}
        value = verdict.get("passed")
        return value if isinstance(value, bool) else None

    @property
    def reasons(self) -> list[str]:
        return [str(r) for r in (self.report.get("verdict") or {}).get("reasons") or []]

    @property
    def t0(self) -> float:
        """The run's time origin: its start, else its first event."""
        start = _num(self.report.get("started_at"))
        first = self.events[0].t if self.events else None
        candidates = [t for t in (start, first) if t is not None]
        return min(candidates) if candidates else 0.0

    @property
    def t_end(self) -> float:
        end = _num(self.report.get("finished_at"))
        last = self.events[-1].t if self.events else None
        candidates = [t for t in (end, last) if t is not None]
        return max(candidates) if candidates else self.t0

    @property
    def title(self) -> str:
        return str(self.report.get("scenario") or self.folder.name)

    @property
    def platform(self) -> str:
        return str(self.report.get("platform") or "unknown")

    @property
    def job(self) -> dict[str, Any]:
        job = self.report.get("job")
        return job if isinstance(job, dict) else {}

    @property
    def placement(self) -> dict[str, Any] | None:
        """How the local platform placed the job on GPUs (report.json ``placement``), if it did."""
        placement = self.report.get("placement")
        return placement if isinstance(placement, dict) else None

    @property
    def progress_unit(self) -> str:
        """What the job's progress counts (a script's ``--unit``; ``step`` otherwise)."""
        observation = self.report.get("observation")
        return str((observation if isinstance(observation, dict) else {}).get("unit") or "step")


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def load_run(folder: Path) -> RunData:
    """Load a report folder. Raises SpecError when it holds neither report.json
    nor timeline.jsonl (it is not a report folder)."""
    report_path, timeline_path = folder / REPORT, folder / TIMELINE
    if not folder.is_dir():
        raise SpecError(f"{folder} is not a folder; pass a report folder (one per run, "
                        "e.g. reports/demo-<time>/ with report.json and timeline.jsonl)")
    if not report_path.exists() and not timeline_path.exists():
        raise SpecError(f"{folder} has neither {REPORT} nor {TIMELINE}; pass a report folder "
                        "(one per run, e.g. reports/demo-<time>/)")
    missing: list[str] = []
    events: list[Event] = []
    bad = 0
    if timeline_path.exists():
        read = read_timeline(timeline_path)
        events, bad = read.events, len(read.errors)
        note = read.note(TIMELINE)
        if note is not None:
            missing.append(note)
    else:
        missing.append(f"no {TIMELINE}: no timeline picture, no log excerpts by time")
    report, has_report = _read_report(report_path, missing)
    if not has_report:
        report = reconstruct_report(events)
    _check_finished(events, missing, timeline_path.exists())
    faults = [_fault_view(f) for f in report.get("faults") or [] if isinstance(f, dict)]
    if not faults:
        missing.append("no fault was injected in this run: nothing to measure")
    return RunData(folder=folder, report=report, events=events, faults=faults,
                   node_logs=_node_logs(folder, report, missing), missing=missing,
                   has_report_json=has_report, bad_lines=bad, result=RunResult.from_json(report))


def read_result(folder: Path) -> RunResult | None:
    """``folder``/report.json as the typed result; None when it is absent or not a JSON object.
    Raises ReportInvalid (a SpecError) naming a field of the wrong type."""
    try:
        raw = json.loads((folder / REPORT).read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict):
        return None
    check_report(raw, str(folder / REPORT))
    return RunResult.from_json(raw)


def _read_report(path: Path, missing: list[str]) -> tuple[dict[str, Any], bool]:
    if not path.exists():
        missing.append(f"no {REPORT}: the run ended before writing it (crashed or killed); "
                       "the job spec, faults and metrics below are recomputed from the timeline "
                       "and there is no verdict")
        return {}, False
    try:
        raw = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError as exc:
        missing.append(f"{REPORT} is not valid JSON ({exc}); metrics recomputed from the timeline")
        return {}, False
    if not isinstance(raw, dict):
        missing.append(f"{REPORT} is not a JSON object; metrics recomputed from the timeline")
        return {}, False
    check_report(raw, str(path))  # a field of the wrong type is named, not met as a traceback while rendering
    version = raw.get("schema_version")
    if version != SCHEMA_VERSION:
        missing.append(f"{REPORT} has schema_version {version!r}; this renderer knows {SCHEMA_VERSION} and "
                       "shows what it recognises")
    return raw, True


def reconstruct_report(events: list[Event]) -> dict[str, Any]:
    """A report.json-shaped dict from a timeline alone (no verdict: none was reached)."""
    started = first(events, RunnerEv.JOB_STARTED)
    spec = started.data.spec if started else None
    return {
        "schema_version": SCHEMA_VERSION,
        "scenario": None,
        "platform": started.data.platform if started else None,
        "job": spec if isinstance(spec, dict) else None,
        "verdict": {"passed": None, "reasons": ["no verdict: the run never finished"]},
        "faults": [f.to_json() for f in fault_results(events)],
        "started_at": events[0].t if events else None,
        "finished_at": None,
        "timeline": TIMELINE,
        "node_logs": {},
        "placement": placement_of(events),
    }


def fault_events(events: list[Event]) -> list[Event]:
    """Injected faults and, from a passive watch, observed losses, in time order."""
    return of(events, FaultEv.INJECTED, FaultEv.OBSERVED)


def fault_results(events: list[Event]) -> list[FaultResult]:
    """Each fault of a timeline (injected, or observed by a passive watch) with its
    chaos.analysis.recovery metrics, each measured up to the next fault."""
    out = []
    marks = fault_events(events)
    for i, fe in enumerate(marks):
        until = marks[i + 1].t if i + 1 < len(marks) else None
        record = FaultRecord.from_event(fe)
        rec = analysis.analyze_fault(events, kind=record.kind, target=fe.node, injected_at=fe.t, until=until)
        out.append(FaultResult.measure(record, rec, events))
    return out


def _check_finished(events: list[Event], missing: list[str], have_timeline: bool) -> None:
    if not have_timeline:
        return
    if not events:
        missing.append(f"{TIMELINE} holds no events")
        return
    phases = of(events, RunnerEv.PHASE)
    if not any(e.data.phase == "finished" for e in phases):
        last = phases[-1].data.phase if phases else "none"
        missing.append(f"the timeline ends without the 'finished' phase (last phase: {last}): "
                       "the run was interrupted, events after that are lost")


def _fault_view(raw: dict[str, Any]) -> FaultView:
    metrics = raw.get("metrics")
    return FaultView(kind=str(raw.get("kind", "unknown")), target=raw.get("target"),
                     injected_at=_num(raw.get("injected_at")) or 0.0,
                     metrics=metrics if isinstance(metrics, dict) else {}, observed=raw.get("observed") is True)


def _node_logs(folder: Path, report: dict[str, Any], missing: list[str]) -> dict[str, Path]:
    logs: dict[str, Path] = {}
    listed = report.get("node_logs")
    if isinstance(listed, dict):
        for name, rel in listed.items():
            path = Path(str(rel))
            logs[str(name)] = path if path.is_absolute() else folder / path
    for path in sorted((folder / "nodes").glob("*.log")):
        logs.setdefault(path.stem, path)
    for name, path in list(logs.items()):
        if not path.exists():
            missing.append(f"the log of {name} ({path.name}) is missing")
            del logs[name]
    return logs
