"""The recovery table's rows, shared by report.html and summary.md.

Same columns as the terminal table (chaos.reporting.report.render_table), as cells of
text, so every rendering of a run shows the same numbers.
"""
from __future__ import annotations

from typing import Any

from chaos.analysis.recovery import PHASES
from chaos.reporting.load import FaultView

HEADER = ("fault", "target", *PHASES, "regain", "lost steps", "resumed from", "world size", "replacement",
          "restarts")


def fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.1f}{unit}"
    return f"{v}{unit}"


def row(f: FaultView) -> list[str]:
    m = f.metrics
    ws = f"{fmt(m.get('world_size_before'))} -> {fmt(m.get('world_size_after'))}"
    final = m.get("world_size_final")
    if final is not None and final != m.get("world_size_after"):
        ws += f" -> {final}"
    return [f.kind, str(f.target), *(fmt(f.phases.get(p), "s") for p in PHASES), fmt(m.get("regain_s"), "s"),
            fmt(m.get("lost_steps")), fmt(m.get("resumed_from_step")), ws, fmt(m.get("replacement_s"), "s"),
            fmt(m.get("restarts_used"))]


def notes(faults: list[FaultView]) -> list[str]:
    """Why a metric is empty, per fault (analysis.Recovery.missing)."""
    out = []
    for f in faults:
        for why in f.metrics.get("missing") or []:
            out.append(f"{f.kind} on {f.target}: {why}")
    return out
