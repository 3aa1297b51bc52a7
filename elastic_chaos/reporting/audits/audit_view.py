"""An audit as a terminal table and as one self-contained HTML page.

Same numbers in both (elastic_chaos.reporting.audits.audit computes them); the page adds a
stacked bar of the p50 phases per group and links to every run's report.
"""
from __future__ import annotations

import datetime
import os
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from elastic_chaos.analysis.metrics import Metric
from elastic_chaos.analysis.recovery import PHASES
from elastic_chaos.analysis.stats import Stat
from elastic_chaos.reporting.audits.audit import (
    SCORE_HALF_S,
    Group,
    Regression,
    RunSummary,
    Skipped,
    audited,
    measured_metrics,
)
from elastic_chaos.reporting.views.html import AUDIT_CSP, CSS
from elastic_chaos.reporting.views.svg import phase_bars_svg
from elastic_chaos.reporting.views.table import aligned
from elastic_chaos.reporting.views.text import escape


def headline() -> list[Metric]:
    """The audited metrics besides the phases (regain, lost steps): the summary's p50 columns."""
    return [m for m in audited().values() if not m.phase]


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def summary_rows(groups: Sequence[Group], half_s: float) -> list[list[str]]:
    shown = [m for m in headline() if m in measured_metrics(groups)]
    rows = [["fault", "platform", "runs", "faults", "pass rate", *(f"{m.title()} p50" for m in shown),
             "goodput p50", "score"]]
    for g in groups:
        rows.append([g.fault, g.platform, str(len(g.runs)), str(len(g.faults)),
                     f"{g.pass_rate:.0%} ({g.passed}/{len(g.runs)})",
                     *(m.format(g.stat(m.name).p50) for m in shown), _pct(g.goodput.p50),
                     f"{g.score(half_s):.0f}"])
    return rows


def metric_rows(g: Group) -> list[list[str]]:
    rows = [["metric", "n", "p50", "p95", "max"]]
    for m in measured_metrics([g]):
        s = g.stat(m.name)
        rows.append([m.title(), str(s.n), m.format(s.p50), m.format(s.p95), m.format(s.max)])
    return rows


def not_counted(runs: Sequence[RunSummary], skipped: Sequence[Skipped]) -> list[str]:
    """The lines that list what no group counts: runs apart (not steady, the toolkit's error) and
    skipped folders (unreadable, or stopped by a usage error), each with why."""
    apart = [r for r in runs if not r.judged]
    lines = []
    if apart:
        lines += ["", f"{len(apart)} run(s) listed apart (not a verdict on the hypothesis; in no pass rate or "
                      "score):"]
        lines += [f"  {r.folder}: {r.outcome.value if r.outcome else '-'}: {r.why[:300]}" for r in apart]
    if skipped:
        lines += ["", f"{len(skipped)} folder(s) skipped (not readable as a run; in no pass rate or score):"]
        lines += [f"  {s.folder}: {s.reason[:300]}" for s in skipped]
    return lines


def render_text(runs: Sequence[RunSummary], groups: Sequence[Group], *, baseline: Sequence[RunSummary] = (),
                regressions: Sequence[Regression] = (), half_s: float = SCORE_HALF_S,
                skipped: Sequence[Skipped] = ()) -> str:
    judged = sum(1 for r in runs if r.judged)
    lines = [f"audit of {judged} run(s): {len(groups)} group(s) (fault kind x platform)", ""]
    if not groups:
        lines.append("no injected fault in these runs: nothing to aggregate")
    else:
        lines += aligned(summary_rows(groups, half_s))
    for g in groups:
        lines += ["", f"{g.fault} on {g.platform}: {len(g.faults)} fault(s) in {len(g.runs)} run(s)"
                  + (f", {g.incomplete} without a verdict" if g.incomplete else "")]
        lines += aligned(metric_rows(g))
    if baseline:
        lines.append("")
        if regressions:
            lines.append(f"REGRESSIONS against the baseline ({len(baseline)} run(s)):")
            lines += [f"  {r.describe()}" for r in regressions]
        else:
            lines.append(f"no regression against the baseline ({len(baseline)} run(s))")
    lines += not_counted(runs, skipped)
    lines += ["", f"percentiles: nearest rank; score = 100 x pass rate x mean({half_s:g} / ({half_s:g} + "
              "regain_s)); see docs/REPORTS.md"]
    return "\n".join(lines)


def _html_table(rows: list[list[str]], table_id: str = "") -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows[1:])
    ident = f' id="{table_id}"' if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _p50_phases(g: Group) -> dict[str, float | None]:
    """The p50 of each phase some recovery of the group went through (a phase that
    applied to none, such as a stall among restarts, is left out)."""
    stats: dict[str, Stat] = {p: g.stat(p) for p in PHASES}
    return {p: s.p50 for p, s in stats.items() if s.n or not _never_applies(g, p)}


def _never_applies(g: Group, phase: str) -> bool:
    return all(phase in f.recovery.not_applicable for f in g.faults)


def _run_link(run: RunSummary, out_dir: Path) -> str:
    html = run.folder / "report.html"
    target = html if html.exists() else run.folder
    rel = urllib.parse.quote(Path(os.path.relpath(target.resolve(), out_dir.resolve())).as_posix())
    rel = rel if rel.startswith("../") else "./" + rel   # a path, never read as a scheme
    verdict = "passed" if run.passed else "FAILED" if run.passed is False else "no verdict"
    if not run.judged and run.outcome is not None:
        verdict = f"{run.outcome.value}: {run.why[:200]}"
    kinds = ", ".join(sorted({f.fault for f in run.faults})) or "no fault"
    return (f'<li><a href="{escape(rel)}">{escape(str(run.folder))}</a>: {escape(verdict)}, '
            f"{escape(run.platform)}, {escape(kinds)}</li>")


def render_html(runs: Sequence[RunSummary], groups: Sequence[Group], out_path: Path, *,
                baseline: Sequence[RunSummary] = (), regressions: Sequence[Regression] = (),
                half_s: float = SCORE_HALF_S, skipped: Sequence[Skipped] = ()) -> str:
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    judged = [r for r in runs if r.judged]
    parts = [f"<h1>Resilience audit: {len(judged)} run(s)</h1>",
             f'<div class="meta">written {now} · percentiles are nearest-rank · score = 100 × pass rate × '
             f"mean({half_s:g} / ({half_s:g} + regain_s)) · definitions in docs/REPORTS.md</div>"]
    if baseline:
        cls = "failed" if regressions else "passed"
        title = (f"{len(regressions)} regression(s) against the baseline ({len(baseline)} run(s))"
                 if regressions else f"No regression against the baseline ({len(baseline)} run(s))")
        items = "".join(f"<li>{escape(r.describe())}</li>" for r in regressions)
        parts.append(f'<div class="verdict {cls}" id="regressions"><b>{escape(title)}</b><ul>{items}</ul></div>')
    if groups:
        parts += ["<h2>Per fault kind and platform</h2>", _html_table(summary_rows(groups, half_s), "groups"),
                  "<h2>Recovery phases (p50)</h2>",
                  phase_bars_svg([(f"{g.fault} on {g.platform}", _p50_phases(g)) for g in groups],
                                 svg_id="audit-phases")]
        for g in groups:
            parts.append(f"<h2>{escape(g.fault)} on {escape(g.platform)}: {len(g.faults)} fault(s), "
                         f"{len(g.runs)} run(s)</h2>")
            parts.append(_html_table(metric_rows(g)))
    else:
        parts.append("<p>No injected fault in these runs: nothing to aggregate.</p>")
    parts.append("<h2>Runs</h2><ul>" + "".join(_run_link(r, out_path.parent) for r in judged) + "</ul>")
    apart = [r for r in runs if not r.judged]
    if apart:
        parts.append('<h2 id="apart">Listed apart: not a verdict on the hypothesis</h2><ul>' + "".join(
            _run_link(r, out_path.parent) for r in apart) + "</ul>")
    if skipped:
        parts.append('<h2 id="skipped">Skipped: not readable as a run</h2><ul>' + "".join(
            f"<li>{escape(str(s.folder))}: {escape(s.reason[:300])}</li>" for s in skipped) + "</ul>")
    if baseline:
        parts.append("<h2>Baseline runs</h2><ul>"
                     + "".join(_run_link(r, out_path.parent) for r in baseline) + "</ul>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{AUDIT_CSP}">'
            f"<title>elastic-chaos audit</title><style>{CSS}</style></head><body>"
            + "\n".join(parts) + "</body></html>\n")
