"""Write a run's report folder from its report, and the tables a person reads at the end.

``write_report`` writes report.json (elastic_chaos.analysis.result has its schema) from the run's
typed result, then the readable renderings beside it (report.html, summary.md,
metrics.prom, timeline.png: elastic_chaos.reporting.render) from the same report in memory;
``elastic-chaos report DIR`` renders the same from the folder (elastic_chaos.reporting.load).
"""
from __future__ import annotations

import logging
from pathlib import Path

from elastic_chaos.analysis.result import REPORT, RunResult
from elastic_chaos.analysis.verdict import NO_VERDICT_WORD
from elastic_chaos.reporting.render import RenderResult, render
from elastic_chaos.reporting.run_report import RunReport
from elastic_chaos.reporting.schema import dumps
from elastic_chaos.reporting.views import table
from elastic_chaos.reporting.views.text import visible

log = logging.getLogger(__name__)


def write_result(result: RunResult, folder: Path) -> Path:
    """Write ``folder``/report.json (atomically: a reader never sees half of it); returns it. OSError when
    it cannot be written (a full disk): no half-written temporary file is left."""
    path = folder / REPORT
    tmp = path.with_suffix(".json.tmp")
    try:
        tmp.write_text(dumps(result.to_json(), indent=2) + "\n")
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_report(report: RunReport, *, png: bool = True) -> RenderResult | None:
    """Write report.json, then the readable renderings; returns what was rendered (None when the
    renderings failed: logged with the command that retries them, and report.json is kept).
    Overwrites what an earlier call wrote."""
    write_result(report.result, report.folder)
    try:
        rendered = render(report, png=png)
    except Exception as exc:  # noqa: BLE001 - report.json is written; the page must not fail the run
        log.warning("report.html could not be rendered (%s: %s); report.json is complete. "
                    "Retry with `elastic-chaos report %s`", type(exc).__name__, exc, report.folder)
        return None
    for note in rendered.notes:
        log.info(note)
    return rendered


def render_table(result: RunResult) -> str:
    """Every table of the run (report.html shows the same), the verdict and the notes."""
    lines: list[str] = []
    for t in table.tables(result):
        if lines:
            lines.append("")
        if t.group != "recovery":
            lines.append(t.title)
        lines += table.aligned(t.rows)
    lines += ["", "verdict: " + (result.verdict.outcome.describe() if result.verdict else NO_VERDICT_WORD)]
    reasons = result.verdict.reasons if result.verdict else ["no verdict was reached"]
    lines += [f"  {r}" for r in reasons]
    lines += [f"  note ({n.split(': ', 1)[0]}): {n.split(': ', 1)[1]}" for n in table.notes(result)]
    lines += [f"  {remark}" for remark in table.remarks(result)]
    return visible("\n".join(lines))   # to a terminal: a script's ESC sequences shown, never obeyed
