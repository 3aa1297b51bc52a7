"""Write a run's report folder from its result, and the recovery table a person reads at the end.

``write_report`` writes report.json (chaos.reporting.result has its schema) from a
RunResult, then the readable renderings beside it (report.html, summary.md,
timeline.png: chaos.reporting.render) from the folder alone, so
``elastic-chaos report DIR`` re-renders exactly the same.
"""
from __future__ import annotations

import logging
from pathlib import Path

from chaos.reporting import replay_table, table, throughput_table
from chaos.reporting.result import REPORT, RunResult
from chaos.reporting.schema import dumps

log = logging.getLogger(__name__)


def write_report(result: RunResult, folder: Path) -> Path | None:
    """Write ``folder``/report.json (atomically: a reader never sees half of it), then
    the readable renderings; returns report.html (None when it could not be
    rendered: see write_readable). Overwrites what an earlier call wrote."""
    path = folder / REPORT
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(dumps(result.to_json(), indent=2) + "\n")
    tmp.replace(path)
    return write_readable(folder)


def write_readable(report_dir: Path) -> Path | None:
    """report.html, summary.md (and timeline.png) beside report.json; returns the
    HTML path. A rendering failure is logged with the command that retries it,
    and never costs the run its report.json."""
    from chaos.reporting import render_folder
    try:
        result = render_folder(report_dir)
    except Exception as exc:  # noqa: BLE001 - report.json is written; the page must not fail the run
        log.warning("report.html could not be rendered (%s: %s); report.json is complete. "
                    "Retry with `elastic-chaos report %s`", type(exc).__name__, exc, report_dir)
        return None
    for note in result.notes:
        log.info(note)
    return result.html


def render_table(result: RunResult) -> str:
    """The recovery table (the columns report.html shows), the verdict and the notes."""
    failures = [f for f in result.faults if f.throughput is None]  # a slow node is no failure to recover from
    rows = [table.header(result.progress_unit)]
    rows += [table.row(f.record.kind, f.record.target, f.recovery) for f in failures]
    slowed = throughput_table.rows([(f.record.kind, f.throughput) for f in result.faults if f.throughput])
    lines = [*(table.aligned(rows) if failures or not slowed else []), *(table.aligned(slowed) if slowed else [])]
    if result.replay:
        lines += ["", replay_table.title(result.replay), *table.aligned(replay_table.rows(result.replay))]
    lines += ["", "verdict: " + ("PASSED" if result.passed else "FAILED")]
    reasons = result.verdict.reasons if result.verdict else ["no verdict was reached"]
    lines += [f"  {r}" for r in reasons]
    lines += [f"  note ({f.recovery.fault_kind} on {f.recovery.target}): {why}" for f in failures
              for why in f.recovery.missing]
    lines += [f"  note ({f.record.kind} on {f.record.target}): {why}" for f in result.faults if f.throughput
              for why in f.throughput.missing]
    lines += [f"  {remark}" for remark in table.remarks([f.recovery for f in failures], result.placement)]
    lines += [f"  note (script): {why}" for why in (result.observation or {}).get("notes") or []]
    return "\n".join(lines)

