"""Render a run's report: report.html, summary.md, metrics.prom and (with matplotlib) timeline.png.

``render`` takes a RunReport (elastic_chaos.reporting.run_report): from memory at the end of a
run (elastic_chaos.reporting.report.write_report), or loaded from a folder by
``render_folder`` for ``elastic-chaos report DIR``. Files are written atomically
(temp file, then rename): a reader never sees half a page.
"""
from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, field
from pathlib import Path

from elastic_chaos.analysis.advice import advise
from elastic_chaos.analysis.advice.finding import Finding
from elastic_chaos.analysis.result import FaultResult
from elastic_chaos.errors import SpecError
from elastic_chaos.reporting.load import load_run
from elastic_chaos.reporting.run_report import RunReport
from elastic_chaos.reporting.views import png as png_mod
from elastic_chaos.reporting.views.excerpts import Excerpt, excerpt, window
from elastic_chaos.reporting.views.html import render_html
from elastic_chaos.reporting.views.markdown import render_markdown
from elastic_chaos.reporting.views.prometheus import write_metrics
from elastic_chaos.reporting.views.series import Series, extract

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RenderResult:
    run: RunReport
    html: Path
    markdown: Path
    png: Path | None
    notes: list[str] = field(default_factory=list)
    """What was skipped and why (e.g. no matplotlib for timeline.png)."""
    findings: list[Finding] = field(default_factory=list)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise SpecError(f"cannot write {path.name} into {path.parent} ({exc.strerror or exc}); render a "
                        "folder you can write to (copy it first)") from None


def fault_excerpts(run: RunReport) -> list[tuple[FaultResult, list[Excerpt]]]:
    out = []
    tz = log_timezone(run.platform, run.result.log_utc_offset_s)
    for f in run.faults:
        start, end = window(f.measured_from, f.recovery.regain_s)
        # the target's last lines before its end (after SIGTERM it may print for a while), the survivors' failure
        ended = f.record.hit.ended_at() if f.record.hit is not None else f.injected_at
        out.append((f, [excerpt(node, path, start, end, tz,
                                survivor_after=f.injected_at if node != f.target else None,
                                killed_at=ended if node == f.target else None)
                        for node, path in run.node_logs.items()]))
    return out


def log_timezone(platform: str, utc_offset_s: float | None = None) -> datetime.tzinfo | None:
    """The zone the nodes wrote their log times in: the offset the run recorded (report.json's
    ``log_utc_offset_s``), else the platform's own zone (None: this machine's local time)."""
    if utc_offset_s is not None:
        return datetime.timezone(datetime.timedelta(seconds=utc_offset_s))
    from elastic_chaos.platforms import PLATFORMS, platform_class
    if platform not in PLATFORMS:
        return None
    try:
        return platform_class(platform).node_log_timezone()
    except ImportError:  # a platform whose module cannot load here: its report still renders
        return None


def _png(folder: Path, series: Series, run: RunReport, notes: list[str]) -> Path | None:
    """timeline.png, optional: a drawing error is a note, never a lost report."""
    path, tmp = folder / "timeline.png", folder / "timeline.png.tmp.png"
    try:
        png_mod.write_png(tmp, series, run.faults, run.t0, run.t_end, run.title)
        tmp.replace(path)
    except Exception as exc:  # noqa: BLE001 - matplotlib fails in many ways; the HTML report stands alone
        tmp.unlink(missing_ok=True)
        notes.append(f"timeline.png could not be drawn ({type(exc).__name__}: {exc}); report.html has the "
                     "same picture")
        return None
    return path


def _metrics_file(run: RunReport) -> list[str]:
    """metrics.prom (elastic_chaos.reporting.views.prometheus); a failure is a note, never a lost report."""
    try:
        write_metrics(run)
    except (OSError, ValueError) as exc:
        return [f"metrics.prom could not be written ({type(exc).__name__}: {exc})"]
    return []


def render_folder(folder: Path, *, png: bool = True) -> RenderResult:
    """``render`` of the report folder ``folder`` as it is (``elastic-chaos report DIR``).
    Raises SpecError for a folder that is not a report folder."""
    return render(load_run(folder), png=png)


def render(run: RunReport, *, png: bool = True) -> RenderResult:
    """Write report.html, summary.md and metrics.prom (and timeline.png when matplotlib is
    installed and ``png``) into the run's folder. Idempotent: re-rendering overwrites."""
    folder = run.folder
    notes: list[str] = _metrics_file(run)
    series = extract(run.events, run.t_end)
    findings = advise(run)
    gp = run.result.goodput
    png_path: Path | None = None
    if png and run.events:
        if png_mod.available():
            png_path = _png(folder, series, run, notes)
        else:
            notes.append(png_mod.MISSING_NOTE)
    html_path, md_path = folder / "report.html", folder / "summary.md"
    _write(html_path, render_html(run, series, findings, fault_excerpts(run), goodput=gp,
                                  png=png_path is not None, notes=notes))
    _write(md_path, render_markdown(run, findings, goodput=gp, png=png_path is not None))
    return RenderResult(run=run, html=html_path, markdown=md_path, png=png_path, notes=notes,
                        findings=findings)
