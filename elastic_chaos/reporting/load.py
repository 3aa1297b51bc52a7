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

``read_report_json`` is the one reader of report.json: a folder in its place, a
file that is not UTF-8, not JSON, nested deeper than JSON's reader goes, larger
than :data:`MAX_REPORT_BYTES`, not an object or with a field of the wrong type is
a ``ReportUnreadable`` naming the file, the line (where JSON's reader gives one)
and why. ``report DIR`` then renders what the timeline says (a wrong-typed field
is refused, exit 2); ``audit`` (``strict=True``) skips the run and lists it.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

from elastic_chaos.analysis.goodput import goodput
from elastic_chaos.analysis.result import REPORT, SCHEMA_VERSION, TIMELINE, RunResult, result_of_timeline
from elastic_chaos.errors import SpecError
from elastic_chaos.events import Event, read_timeline
from elastic_chaos.reporting.run_report import RunReport, missing_in
from elastic_chaos.reporting.schema import ReportInvalid, ReportUnreadable, check_report
from elastic_chaos.spec import JobSpec

KNOWN_VERSIONS = (1, SCHEMA_VERSION)
MAX_REPORT_BYTES = 256 * 1024 * 1024
"""The largest report.json read (a run of many faults writes well under a megabyte)."""


def load_run(folder: Path, *, strict: bool = False) -> RunReport:
    """Load a report folder. Raises SpecError when it holds neither report.json
    nor timeline.jsonl (it is not a report folder), ReportInvalid for a field of the
    wrong type, and with ``strict`` (the audit) ReportUnreadable for a report.json that
    cannot be read at all (else that is noted in ``missing`` and the timeline speaks)."""
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
    result = _read_report(report_path, missing, strict=strict)
    complete = result is not None
    if result is None:
        result = result_of_timeline(events)
    elif result.goodput is None and events:   # written before report.json kept it: the same formula, now
        gp = goodput(events, end=result.finished_at)
        result = dataclasses.replace(result, goodput=None if gp is None else round(gp, 4))
    missing += missing_in(result, events, have_timeline=timeline_path.exists())
    if not complete:
        missing += _full_disk(folder)
    return RunReport(folder=folder, result=result, events=events, node_logs=_node_logs(folder, result, missing),
                     missing=tuple(missing), complete=complete)


def read_result(folder: Path) -> RunResult | None:
    """``folder``/report.json as the typed result; None when it is absent or cannot be read.
    Raises ReportInvalid (a SpecError) naming a field of the wrong type."""
    path = folder / REPORT
    if not path.exists():
        return None
    try:
        return RunResult.from_json(read_report_json(path))
    except ReportInvalid:
        raise
    except ReportUnreadable:
        return None


def read_report_json(path: Path) -> dict[str, Any]:
    """report.json at ``path`` as its JSON object, checked field by field (the one reader of
    report.json files). Raises ReportUnreadable naming the file, the line where known, and why."""
    if path.is_dir():
        raise ReportUnreadable(f"{path}: a folder, not a file")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_REPORT_BYTES + 1)
    except OSError as exc:
        raise ReportUnreadable(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(data) > MAX_REPORT_BYTES:
        raise ReportUnreadable(f"{path}: larger than {MAX_REPORT_BYTES // (1024 * 1024)} MiB, no run writes that")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ReportUnreadable(f"{path}:{line}: not UTF-8 text (byte {exc.start})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportUnreadable(f"{path}:{exc.lineno}: not JSON ({exc.msg}, column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:   # nested deeper than the reader goes
        what = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:80]
        raise ReportUnreadable(f"{path}: not a report ({what})") from None
    if not isinstance(raw, dict):
        raise ReportUnreadable(f"{path}: not a JSON object")
    check_report(raw, str(path))  # a field of the wrong type is named, not met as a traceback while rendering
    return raw


def _read_report(path: Path, missing: list[str], *, strict: bool = False) -> RunResult | None:
    if not path.exists():
        missing.append(f"no {REPORT}: the run ended before writing it (crashed or killed); "
                       "the job spec, faults and metrics below are recomputed from the timeline "
                       "and there is no verdict")
        return None
    try:
        raw = read_report_json(path)
    except ReportInvalid:
        raise
    except ReportUnreadable as exc:
        if strict:
            raise
        missing.append(f"{exc}; metrics recomputed from the timeline")
        return None
    version = raw.get("schema_version")
    if version not in KNOWN_VERSIONS:
        missing.append(f"{REPORT} has schema_version {version!r}; this renderer knows {KNOWN_VERSIONS} and "
                       "shows what it recognises")
    return RunResult.from_json(raw)


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


FULL_BELOW = 4 * 1024 * 1024
"""A folder whose disk has less free space than this may have been cut short by it."""


def _full_disk(folder: Path) -> list[str]:
    """A run that left no report.json on a disk that is full now: the likely cause, said."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return []
    if free >= FULL_BELOW:
        return []
    return [f"the disk holding {folder} has {free:,} bytes free: a full disk may have stopped this run before it "
            "wrote report.json (free some space; the timeline and node logs are what it kept)"]
