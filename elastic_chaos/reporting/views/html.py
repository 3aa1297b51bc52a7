"""report.html: one self-contained page a person reads in a minute.

Everything is inline (CSS, SVG, a few lines of script) and a Content Security
Policy forbids the page from fetching anything, so the file can be mailed,
attached to a CI run or opened offline, and a browser never goes to the
network for it. Order of the page: verdict, what is missing, the recovery
table and phase bars, the final-state comparison (--compare-final), tuning advice, the
timeline picture, log excerpts, files.
"""
from __future__ import annotations

import base64
import datetime
import hashlib
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from elastic_chaos.analysis.advice.finding import Finding
from elastic_chaos.analysis.metrics import count
from elastic_chaos.analysis.result import FaultResult
from elastic_chaos.analysis.verdict import verdict_word
from elastic_chaos.events import node_name
from elastic_chaos.reporting.run_report import RunReport
from elastic_chaos.reporting.views import table
from elastic_chaos.reporting.views.excerpts import EXPECTED_NOTE, Excerpt, Line
from elastic_chaos.reporting.views.series import GOODPUT_MEANS, Series
from elastic_chaos.reporting.views.svg import PHASE_COLORS, node_color, phase_bars_svg, timeline_svg
from elastic_chaos.reporting.views.text import escape

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1160px;
color:#222;padding:0 16px;line-height:1.4}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;
padding-bottom:4px}.meta{color:#555;font-size:13px}
.verdict{padding:12px 16px;border-radius:6px;margin:16px 0;font-size:15px}
.verdict b{font-size:18px}.passed{background:#e6f4ea;border:1px solid #34a853}
.failed{background:#fce8e6;border:1px solid #d93025}.unknown{background:#f1f3f4;border:1px solid #9aa0a6}
.verdict ul{margin:6px 0 0;padding-left:20px}
.missing{background:#fff7e0;border:1px solid #f2a541;border-radius:6px;padding:8px 16px;margin:12px 0}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #ddd;padding:4px 8px;text-align:right}
th{background:#f5f5f5}td:first-child,td:nth-child(2){text-align:left}
.advice li{margin:6px 0}.setting{font-family:monospace;background:#f1f3f4;padding:1px 4px;border-radius:3px}
.explain{color:#777;font-size:12px}.goodput{border-bottom:1px dotted #777}
.change{font-family:monospace;background:#e6f4ea;border-left:3px solid #188038;padding:2px 6px;margin:3px 0}
pre{background:#fafafa;border:1px solid #eee;padding:8px;font-size:11.5px;overflow-x:auto;margin:4px 0 12px}
pre .agent{color:#1a4d8f}pre .error{color:#b3261e}pre .progress{color:#888}pre .expected{color:#8a6d00}
pre .omitted{color:#888;font-style:italic}pre .t{color:#999}pre .t.inferred{cursor:help}
pre .pulled{background:#f0f0f0}
.expected-note{font-size:12px;color:#8a6d00;margin:2px 0 6px}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px;border-radius:2px}
.chart{overflow-x:auto}
"""

SCRIPT = """
(function () {
  var svg = document.getElementById("timeline");
  if (!svg) { return; }
  var x0 = Number(svg.dataset.x0), x1 = Number(svg.dataset.x1), t1 = Number(svg.dataset.t1);
  var line = svg.querySelector(".cursor"), label = svg.querySelector(".cursor-label");
  svg.addEventListener("mousemove", function (ev) {
    var pt = svg.createSVGPoint();
    pt.x = ev.clientX; pt.y = ev.clientY;
    var p = pt.matrixTransform(svg.getScreenCTM().inverse());
    if (p.x < x0 || p.x > x1) { label.textContent = ""; line.setAttribute("x1", -10);
      line.setAttribute("x2", -10); return; }
    line.setAttribute("x1", p.x); line.setAttribute("x2", p.x);
    label.setAttribute("x", p.x + 4);
    label.textContent = "+" + ((p.x - x0) / (x1 - x0) * t1).toFixed(1) + " s";
  });
  document.documentElement.setAttribute("data-timeline", "ready");
})();
"""


# Only the page's own script runs: the CSP allows exactly its hash, so nothing a
# report folder says (node names, log lines, a crafted report.json) can add one.
SCRIPT_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
CSP = (f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{SCRIPT_HASH}'; "
       "img-src data:; base-uri 'none'; form-action 'none'")
AUDIT_CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'none'; img-src data:; "
             "base-uri 'none'; form-action 'none'")


def local_href(folder: Path, path: Path) -> str | None:
    """A link to ``path`` that stays inside ``folder`` (a relative, quoted path that no
    browser reads as a scheme such as ``javascript:``), or None for anything outside it."""
    try:
        rel = path.resolve().relative_to(folder.resolve())
    except (ValueError, OSError):
        return None
    return "./" + urllib.parse.quote(rel.as_posix())


def _when(ts: float | None) -> str:
    if ts is None:
        return "unknown"
    try:
        return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")
    except (ValueError, OverflowError, OSError):
        return f"{ts!r} (not a time)"


def _verdict(run: RunReport) -> str:
    passed = run.passed
    cls = "passed" if passed else "failed" if passed is False else "unknown"
    word = verdict_word(run.result.verdict)
    items = "".join(f"<li>{escape(r)}</li>" for r in run.reasons)
    return f'<div class="verdict {cls}" id="verdict"><b>{word}</b><ul>{items}</ul></div>'


def _missing(run: RunReport) -> str:
    lines = [*run.missing, *table.notes(run.result)]
    if not lines:
        return ""
    items = "".join(f"<li>{escape(m)}</li>" for m in lines)
    return f'<div class="missing" id="missing"><b>What is missing</b><ul>{items}</ul></div>'


def _remarks(run: RunReport) -> str:
    lines = table.remarks(run.result)
    if not lines:
        return ""
    return '<ul class="notes" id="notes">' + "".join(f"<li>{escape(m)}</li>" for m in lines) + "</ul>"


def _final_state(run: RunReport) -> str:
    lines = table.final_state_lines(run.result)
    if not lines:
        return ""
    return ('<h2>Final state</h2><ul class="notes" id="final-state">'
            + "".join(f"<li>{escape(m)}</li>" for m in lines) + "</ul>")


def _job(run: RunReport) -> str:
    job = run.result.job
    if job is None:
        return "job spec unknown"
    tuned = ", ".join(f"{k}={v}" for k, v in job.rdzv.conf().items())
    bits = [f"nodes {job.nodes}", f"{job.nproc_per_node} worker(s)/node",
            f"rendezvous {job.rdzv.backend.value}" + (f" ({tuned})" if tuned else " (torch defaults)"),
            f"checkpoint every {count(job.checkpoint_every, run.result.progress_unit)}",
            f"max restarts {job.max_restarts}"]
    return " · ".join(escape(b) for b in bits)


def _tables(run: RunReport) -> str:
    """Every table of the run (elastic_chaos.reporting.views.table): the recovery first, headed by its section."""
    if not run.faults and not run.result.measured:
        return "<p>No fault was injected.</p>"
    out = []
    for t in table.tables(run.result):
        head = "".join(f"<th>{escape(h)}</th>" for h in t.rows[0])
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in t.rows[1:])
        title = "" if t.group == "recovery" else f"<h3>{escape(t.title)}</h3>"
        out.append(f'{title}<table id="{escape(t.group)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
                   "</table>")
    return "".join(out)


def _advice(findings: Sequence[Finding], faults: Sequence[FaultResult]) -> str:
    if not findings:
        return ("<p>No phase was dominated by a setting this run can name (each finding needs at least "
                "20% of the fault's regain time).</p>")
    items = []
    for f in findings:
        fault = faults[f.fault_index]
        setting = f' <span class="setting">{escape(f.setting)}</span>' if f.setting else ""
        lead = f.lead()
        change = f'<div class="change">{escape(lead[0].upper() + lead[1:])}</div>' if lead else ""
        items.append(f'<li><b style="color:{PHASE_COLORS.get(f.phase, "#222")}">{escape(f.phase)}</b> '
                     f'({escape(fault.fault)} on {escape(node_name(fault.target))}){setting}: {change}'
                     f'{escape(f.text)}</li>')
    return f'<ul class="advice" id="advice">{"".join(items)}</ul>'


def _legend(series: Series, faults: Sequence[FaultResult]) -> str:
    """What the timeline shows, and nothing it does not: the phases this run's faults went through,
    node events, pauses and checkpoints only where they occur."""
    nodes = series.nodes
    spans = [f'<span><i style="background:{node_color(nodes, n)}"></i>{escape(n)}</span>' for n in nodes]
    occurred = {p for f in faults for p, v in f.phases.items() if v}
    spans += [f'<span><i style="background:{c}"></i>{p}</span>' for p, c in PHASE_COLORS.items() if p in occurred]
    if faults:
        spans.append('<span><i style="background:#d62728"></i>fault</span>')
    if series.node_marks:
        kinds = sorted({m.event for m in series.node_marks})
        spans.append('<span><i style="background:#f2a541;transform:rotate(45deg) scale(0.8)"></i>'
                     f'node event ({escape(", ".join(kinds))})</span>')
    if series.pauses:
        spans.append('<span><i style="background:#eeeeee;border:1px dashed #bbb"></i>no training step '
                     '(world size between two worlds, not 0)</span>')
    ckpt_kinds = {k for _, _, k in series.checkpoints}
    if "saved" in ckpt_kinds:
        spans.append('<span><i style="background:#555;border-radius:6px"></i>checkpoint saved</span>')
    if "loaded" in ckpt_kinds:
        spans.append('<span><i style="background:#2ca02c;border-radius:6px"></i>checkpoint loaded</span>')
    return f'<div class="legend">{"".join(spans)}</div>'


def _excerpts(excerpts: Sequence[tuple[FaultResult, list[Excerpt]]], t0: float) -> str:
    if not excerpts:
        return "<p>No fault, or no node logs: nothing to excerpt.</p>"
    out = []
    for fault, items in excerpts:
        out.append(f"<h3>{escape(fault.fault)} on {escape(node_name(fault.target))} "
                   f"at +{fault.injected_at - t0:.1f}s</h3>")
        shown = [ex for ex in items if ex.lines]
        for ex in shown:
            lines = "\n".join(_excerpt_line(ln, t0) for ln in ex.lines)
            note = f'<p class="expected-note">{escape(EXPECTED_NOTE)}</p>' if ex.expected_errors else ""
            out.append(f"<details{' open' if ex.node == fault.target or len(shown) <= 3 else ''}>"
                       f"<summary>{escape(ex.node)}: {escape(ex.summary(t0))}</summary>{note}<pre>{lines}</pre>"
                       "</details>")
        unread = [f"{ex.node}: {ex.error}" for ex in items if ex.error]
        if unread:
            out.append(f'<p class="meta">Not read: {escape("; ".join(unread))}.</p>')
        quiet = [ex.node for ex in items if not ex.lines and not ex.error]
        if quiet:
            out.append(f'<p class="meta">No log lines in this window from {escape(", ".join(quiet))}.</p>')
    return "".join(out)


def _excerpt_line(ln: Line, t0: float) -> str:
    """One excerpt line: its time from the run's start (``~`` and a title when inferred), its text."""
    when = "" if ln.t is None else f"+{ln.t - t0:.2f}s"
    if ln.inferred and ln.t is not None:
        stamp = (f'<span class="t inferred" title="time inferred: written {_written(ln, t0)}">'
                 f'{("~" + when):>10}</span>')
    else:
        stamp = f'<span class="t">{when:>10}</span>'
    title = ' title="outside the window: shown for what happened"' if ln.pulled else ""
    cls = ln.level + (" pulled" if ln.pulled else "")
    return f'{stamp} <span class="{cls}"{title}>{escape(ln.text)}</span>'


def _written(ln: Line, t0: float) -> str:
    """When a line with an inferred time was written, in words."""
    if ln.after is not None and ln.before is not None:
        return f"between +{ln.after - t0:.2f}s and +{ln.before - t0:.2f}s"
    if ln.after is not None:
        return f"after +{ln.after - t0:.2f}s (no later line has a time)"
    return f"by +{ln.before - t0:.2f}s" if ln.before is not None else "at a time not known"


def _files(run: RunReport, png: bool) -> str:
    names = [n for n in ("report.json", "timeline.jsonl") if (run.folder / n).exists()]
    names += ["summary.md", *(["timeline.png"] if png else [])]
    links = [f'<a href="./{escape(n)}">{escape(n)}</a>' for n in names]
    for node, path in run.node_logs.items():
        href = local_href(run.folder, path)
        links.append(f'<a href="{escape(href)}">{escape(node)} log</a>' if href
                     else f"{escape(node)} log (outside the report folder: not linked)")
    return " · ".join(links)


def render_html(run: RunReport, series: Series, findings: Sequence[Finding],
                excerpts: Sequence[tuple[FaultResult, list[Excerpt]]], *, goodput: float | None,
                png: bool, notes: Sequence[str] = ()) -> str:
    t0, t1 = run.t0, run.t_end
    duration = t1 - t0
    picture = (timeline_svg(series, run.faults, t0, t1) if run.events
               else "<p>No timeline: nothing to draw.</p>")
    gp = (f' · <span class="goodput" title="{escape(GOODPUT_MEANS)}">goodput {goodput:.0%}</span> '
          f'<span class="explain">({escape(GOODPUT_MEANS)})</span>' if goodput is not None else "")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(run.title)}: elastic-chaos report</title>
<style>{CSS}</style></head>
<body>
<h1>{escape(run.title)}</h1>
<div class="meta">platform {escape(run.platform)} · {_job(run)}<br>
started {_when(run.t0)} · {duration:.1f} s{gp} · folder {escape(str(run.folder))}</div>
{_verdict(run)}
{_missing(run)}
<h2>Recovery</h2>
{_tables(run)}
{_remarks(run)}
<div class="chart">{phase_bars_svg([(f"{f.fault} → {node_name(f.target)}", f.phases)
                                    for f in table.shown_faults(run.result)])}</div>
{_final_state(run)}
<h2>Where the time went: tuning advice</h2>
{_advice(findings, run.faults)}
<h2>Timeline</h2>
{_legend(series, run.faults)}
<div class="chart">{picture}</div>
<h2>Logs around each fault</h2>
{_excerpts(excerpts, t0)}
<h2>Files</h2>
<p>{_files(run, png)}</p>
{"".join(f'<p class="meta">{escape(n)}</p>' for n in notes)}
<p class="meta">Written by elastic-chaos. Re-render with
<code>elastic-chaos report {escape(str(run.folder))}</code>.</p>
<script>{SCRIPT}</script>
</body></html>
"""
