"""report.json for a passive watch (``elastic-chaos watch --record DIR``).

A watch tests no hypothesis of its own; its verdict is the one question a
passive audit asks of every observed loss: did the job re-form its
rendezvous and, where progress was visible (``--logs``), regain it? The
metrics are the same chaos.analysis.recovery metrics a scenario gets, timed from the
observed loss (docs/REPORTS.md says how that is timed).
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path

from chaos.analysis.recovery import Recovery
from chaos.analysis.verdict import Verdict
from chaos.events import Event, ProgressEv, first, node_name
from chaos.reporting.load import result_of_timeline
from chaos.reporting.report import write_report
from chaos.reporting.run_report import RunReport, missing_in


def watch_verdict(recoveries: Sequence[Recovery], saw_progress: bool, errors: Sequence[str]) -> Verdict:
    """Each observed loss: the rendezvous re-formed and (where progress was seen) progress
    was regained; and every watcher stopped cleanly."""
    verdict = Verdict()
    for r in recoveries:
        ok = r.rendezvous_s is not None and (not saw_progress or r.regain_s is not None)
        how = f"rendezvous re-formed after {r.rendezvous_s:.1f}s" if r.rendezvous_s is not None \
            else "no rendezvous round completed afterwards"
        if saw_progress:
            how += f", progress regained after {r.regain_s:.1f}s" if r.regain_s is not None \
                else ", progress never regained"
        verdict.require(ok, f"{r.fault_kind} of {node_name(r.target)}: {how}", check="recovered")
    for e in errors:
        verdict.fail(f"watcher: {e}", check="watcher")
    if not recoveries:
        verdict.require(True, "no loss observed while watching", check="recovered")
    return verdict


def write_watch_report(folder: Path, events: list[Event], errors: list[str]) -> Path | None:
    """Write report.json from a watch's events, then the readable renderings; returns report.html."""
    seen = result_of_timeline(events)
    verdict = watch_verdict(seen.recoveries, first(events, ProgressEv.STEP) is not None, errors)
    result = dataclasses.replace(seen, scenario="watch", verdict=verdict, finished_at=round(time.time(), 3))
    rendered = write_report(RunReport(folder, result, events, missing=tuple(missing_in(result, events))))
    return rendered.html if rendered is not None else None
