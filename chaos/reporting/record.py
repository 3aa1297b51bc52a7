"""report.json for a passive watch (``elastic-chaos watch --record DIR``).

A watch tests no hypothesis of its own; its verdict is the one question a
passive audit asks of every observed loss: did the job re-form its
rendezvous and, where progress was visible (``--logs``), regain it? The
metrics are the same chaos.analysis.recovery metrics a scenario gets, timed from the
observed loss (docs/REPORTS.md says how that is timed).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from chaos.events import Event, ProgressEv, first
from chaos.reporting.load import REPORT, reconstruct_report


def watch_verdict(faults: list[dict[str, Any]], saw_progress: bool, errors: list[str]) -> dict[str, Any]:
    reasons = []
    passed = True
    for f in faults:
        m = f.get("metrics") or {}
        what = f"{f.get('kind')} of {f.get('target')}"
        ok = m.get("rendezvous_s") is not None and (not saw_progress or m.get("regain_s") is not None)
        passed = passed and ok
        how = f"rendezvous re-formed after {m['rendezvous_s']:.1f}s" if m.get("rendezvous_s") is not None \
            else "no rendezvous round completed afterwards"
        if saw_progress:
            how += f", progress regained after {m['regain_s']:.1f}s" if m.get("regain_s") is not None \
                else ", progress never regained"
        reasons.append(("ok: " if ok else "FAILED: ") + f"{what}: {how}")
    for e in errors:
        passed = False
        reasons.append(f"FAILED: watcher: {e}")
    if not faults:
        reasons.append("ok: no loss observed while watching")
    return {"passed": passed, "reasons": reasons}


def write_watch_report(folder: Path, events: list[Event], errors: list[str]) -> Path | None:
    """Write report.json from a watch's events, then the readable renderings; returns report.html."""
    report = reconstruct_report(events)
    saw_progress = first(events, ProgressEv.STEP) is not None
    report["scenario"] = "watch"
    report["verdict"] = watch_verdict(report["faults"], saw_progress, errors)
    report["finished_at"] = round(time.time(), 3)
    path = folder / REPORT
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(path)
    from chaos.reporting.report import write_readable
    return write_readable(folder)
