"""report.json for a passive watch (``elastic-chaos watch --record DIR``).

A watch tests no hypothesis of its own; its verdict is the one question a
passive audit asks of every observed loss: did the job re-form its
rendezvous and, where progress was visible (``--logs``), regain it? The
metrics are the same elastic_chaos.analysis.recovery metrics a scenario gets, timed from the
observed loss (docs/REPORTS.md says how that is timed).
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from elastic_chaos.analysis.result import result_of_timeline, watch_verdict
from elastic_chaos.events import Event, ProgressEv, first
from elastic_chaos.reporting.report import write_report
from elastic_chaos.reporting.run_report import RunReport, missing_in


def write_watch_report(folder: Path, events: list[Event], errors: list[str]) -> Path | None:
    """Write report.json from a watch's events, then the readable renderings; returns report.html."""
    seen = result_of_timeline(events)
    verdict = watch_verdict(seen.recoveries, first(events, ProgressEv.STEP) is not None, errors)
    result = dataclasses.replace(seen, scenario="watch", verdict=verdict, finished_at=round(time.time(), 3))
    rendered = write_report(RunReport(folder, result, events, missing=tuple(missing_in(result, events))))
    return rendered.html if rendered is not None else None
