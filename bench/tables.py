"""The median-phase table RESULTS.md shows for the CPU and the GPU cases alike."""
from __future__ import annotations

from typing import Any

from chaos.analysis.recovery import PHASES


def median_cell(stat: dict[str, Any] | None) -> str:
    """A summary's median, one decimal; - when there is none."""
    if not stat or stat.get("median") is None:
        return "-"
    return f"{stat['median']:.1f}"


def phase_table(cases: dict[str, Any], skipped: dict[str, str]) -> list[str]:
    """The median phases per case, with recovery, its ratio to the floor and lost steps."""
    lines = ["| case | " + " | ".join(PHASES) + " | recovery_s | ratio to floor | lost steps | n |",
             "|---|" + "---|" * (len(PHASES) + 4)]
    for key, case in cases.items():
        lines.append(f"| {key} | " + " | ".join(median_cell(case.get(p)) for p in PHASES)
                     + f" | {median_cell(case.get('recovery_s'))} | {case.get('ratio_to_floor')} | "
                     + f"{median_cell(case.get('lost_steps'))} | {case.get('recovery_s', {}).get('n')} |")
    for key, why in skipped.items():
        lines.append(f"| {key} | skipped: {why} |" + " |" * (len(PHASES) + 3))
    return lines
