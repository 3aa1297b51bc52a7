"""Read a report folder as it is, however the run ended: the one typed loader of report folders.

A finished run has report.json, timeline.jsonl and node logs. A run that crashed
may have only part of a timeline (the last line cut mid-write), no report.json,
or logs of some nodes only. ``load_run`` takes whatever is there: report.json read
into the typed result (``RunResult.from_json``, after a field-by-field check), or,
without one, the result rebuilt from the timeline by the same code a run uses
(``result_of_timeline``); it lists in ``missing`` what could not be known, in
sentences a reader understands. Nothing is guessed. ``read_result`` reads a
finished run's report.json alone. Only ``elastic-chaos report DIR`` and ``audit``
(and what they are made of) read folders: a run renders from memory.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaos.errors import SpecError
from chaos.events import Event, FaultEv, RunnerEv, first, of, read_timeline
from chaos.faults.api import FaultRecord
from chaos.reporting.result import REPORT, SCHEMA_VERSION, TIMELINE, RunResult, build_result
from chaos.reporting.run_report import RunReport, missing_in
from chaos.reporting.schema import check_report
from chaos.spec import JobSpec

KNOWN_VERSIONS = (1, SCHEMA_VERSION)


def load_run(folder: Path) -> RunReport:
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
    events: list[Event[Any]] = []
    if timeline_path.exists():
        try:
            read = read_timeline(timeline_path)
        except OSError as exc:
            raise SpecError(f"{timeline_path} cannot be read ({exc.strerror or exc})") from None
        events = read.events
        note = read.note(TIMELINE)
        if note is not None:
            missing.append(note)
    else:
        missing.append(f"no {TIMELINE}: no timeline picture, no log excerpts by time")
    result = _read_report(report_path, missing)
    complete = result is not None
    if result is None:
        result = result_of_timeline(events)
    missing += missing_in(result, events, have_timeline=timeline_path.exists())
    return RunReport(folder=folder, result=result, events=events, node_logs=_node_logs(folder, result, missing),
                     missing=tuple(missing), complete=complete)


def read_result(folder: Path) -> RunResult | None:
    """``folder``/report.json as the typed result; None when it is absent or not a JSON object.
    Raises ReportInvalid (a SpecError) naming a field of the wrong type."""
    raw = _json(folder / REPORT)
    if not isinstance(raw, dict):
        return None
    check_report(raw, str(folder / REPORT))
    return RunResult.from_json(raw)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return None


def _read_report(path: Path, missing: list[str]) -> RunResult | None:
    if not path.exists():
        missing.append(f"no {REPORT}: the run ended before writing it (crashed or killed); "
                       "the job spec, faults and metrics below are recomputed from the timeline "
                       "and there is no verdict")
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (ValueError, RecursionError) as exc:
        missing.append(f"{REPORT} is not valid JSON ({str(exc)[:80]}); metrics recomputed from the timeline")
        return None
    except OSError as exc:
        missing.append(f"{REPORT} cannot be read ({exc.strerror or exc}); metrics recomputed from the timeline")
        return None
    if not isinstance(raw, dict):
        missing.append(f"{REPORT} is not a JSON object; metrics recomputed from the timeline")
        return None
    check_report(raw, str(path))  # a field of the wrong type is named, not met as a traceback while rendering
    version = raw.get("schema_version")
    if version not in KNOWN_VERSIONS:
        missing.append(f"{REPORT} has schema_version {version!r}; this renderer knows {KNOWN_VERSIONS} and "
                       "shows what it recognises")
    return RunResult.from_json(raw)


def result_of_timeline(events: list[Event[Any]]) -> RunResult:
    """What a timeline alone says about a run (no verdict: none was reached): the job it
    started, and every fault it recorded (injected, or observed by a passive watch) measured
    by the same code a run uses."""
    started = first(events, RunnerEv.JOB_STARTED)
    job = _job(started.data.spec if started else None)
    return build_result(events, [FaultRecord.from_event(e) for e in of(events, FaultEv.INJECTED, FaultEv.OBSERVED)],
                        scenario=None, platform=started.data.platform if started else None, job=job, verdict=None,
                        started_at=events[0].t if events else None, finished_at=None,
                        end=events[-1].t if events else None)


def _job(spec: Any) -> JobSpec | None:
    if not isinstance(spec, dict):
        return None
    try:
        return JobSpec.from_json(dict(spec))
    except (SpecError, ValueError, TypeError):
        return None


def _node_logs(folder: Path, result: RunResult, missing: list[str]) -> dict[str, Path]:
    logs: dict[str, Path] = {}
    for name, rel in result.node_logs.items():
        path = Path(rel)
        logs[name] = path if path.is_absolute() else folder / path
    for path in sorted((folder / "nodes").glob("*.log")):
        logs.setdefault(path.stem, path)
    for name, path in list(logs.items()):
        if not path.exists():
            missing.append(f"the log of {name} ({path.name}) is missing")
            del logs[name]
    return logs
