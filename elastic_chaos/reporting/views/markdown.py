"""summary.md: the run in a few lines of Markdown, for a PR comment or a CI job summary."""
from __future__ import annotations

from collections.abc import Sequence

from elastic_chaos.analysis.advice.finding import Finding
from elastic_chaos.analysis.verdict import verdict_word
from elastic_chaos.events import node_name
from elastic_chaos.reporting.run_report import RunReport
from elastic_chaos.reporting.views import table
from elastic_chaos.reporting.views.series import GOODPUT_MEANS
from elastic_chaos.reporting.views.text import visible


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(run: RunReport, findings: Sequence[Finding], *, goodput: float | None,
                    png: bool) -> str:
    word = verdict_word(run.result.verdict)
    lines = [f"# {run.title}: {word}", ""]
    meta = f"platform `{run.platform}`, {run.t_end - run.t0:.1f} s"
    if goodput is not None:
        meta += f", goodput {goodput:.0%} ({GOODPUT_MEANS})"
    lines += [meta, ""]
    lines += [f"- {r}" for r in run.reasons]
    missing = [*run.missing, *table.notes(run.result)]
    if missing:
        lines += ["", "**What is missing**", ""] + [f"- {m}" for m in missing]
    for t in table.tables(run.result):
        header = t.rows[0]
        title = "Recovery" if t.group == "recovery" else t.title
        lines += ["", f"## {title}", "", "| " + " | ".join(_cell(c) for c in header) + " |",
                  "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in t.rows[1:]]
    remarks = table.remarks(run.result)
    if remarks:
        lines += [""] + [f"- {r}" for r in remarks]
    final = table.final_state_lines(run.result)
    if final:
        lines += ["", "## Final state", ""] + [f"- {_cell(r)}" for r in final]
    if findings:
        lines += ["", "## Tuning advice", ""]
        for f in findings:
            fault = run.faults[f.fault_index]
            setting = f" (`{f.setting}`)" if f.setting else ""
            lead = f.lead()
            change = f"**{lead[0].upper() + lead[1:]}.** " if lead else ""
            lines.append(f"- **{f.phase}**, {fault.fault} on {node_name(fault.target)}{setting}: {change}{f.text}")
    files = ["report.html", *(["timeline.png"] if png else []),
             *(n for n in ("report.json", "timeline.jsonl") if (run.folder / n).exists())]
    lines += ["", "Files: " + " · ".join(f"[{n}]({n})" for n in files), ""]
    return visible("\n".join(lines))   # a script's control characters, shown: never passed on
