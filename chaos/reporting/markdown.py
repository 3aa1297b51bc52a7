"""summary.md: the run in a few lines of Markdown, for a PR comment or a CI job summary."""
from __future__ import annotations

from collections.abc import Sequence

from chaos.reporting import table
from chaos.reporting.finding import Finding
from chaos.reporting.load import RunData


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(run: RunData, findings: Sequence[Finding], *, goodput: float | None,
                    png: bool) -> str:
    passed = run.passed
    word = "PASSED" if passed else "FAILED" if passed is False else "NO VERDICT"
    lines = [f"# {run.title}: {word}", ""]
    meta = f"platform `{run.platform}`, {run.t_end - run.t0:.1f} s"
    if goodput is not None:
        meta += f", goodput {goodput:.0%}"
    lines += [meta, ""]
    lines += [f"- {r}" for r in run.reasons]
    missing = [*run.missing, *table.notes(f.recovery for f in run.faults)]
    if missing:
        lines += ["", "**What is missing**", ""] + [f"- {m}" for m in missing]
    if run.faults:
        header = table.header(run.progress_unit)
        lines += ["", "## Recovery", "", "| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(_cell(c) for c in table.row(f.kind, f.target, f.recovery)) + " |"
                  for f in run.faults]
    remarks = table.remarks((f.recovery for f in run.faults), run.placement)
    if remarks:
        lines += [""] + [f"- {r}" for r in remarks]
    if findings:
        lines += ["", "## Tuning advice", ""]
        for f in findings:
            fault = run.faults[f.fault_index]
            setting = f" (`{f.setting}`)" if f.setting else ""
            lines.append(f"- **{f.phase}**, {fault.kind} on {fault.target}{setting}: {f.text}")
    files = ["report.html", *(["timeline.png"] if png else []),
             *(n for n in ("report.json", "timeline.jsonl") if (run.folder / n).exists())]
    lines += ["", "Files: " + " · ".join(f"[{n}]({n})" for n in files), ""]
    return "\n".join(lines)
