"""The recovery table, the same in every rendering: the terminal, report.html and summary.md.

Its columns are the fault, its target, then the metrics declared with
``table=True`` (chaos.analysis.recovery.METRICS), in declaration order, each
titled with its label. Metrics declared with the same ``column`` share one
cell, as a path: world size ``2 -> 1``, and ``-> 2`` after it when the
final size differs (a later value shows only when it is known and changed).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from chaos.analysis import recovery
from chaos.analysis.metrics import Metric
from chaos.analysis.recovery import Recovery


@dataclass(frozen=True)
class Column:
    """One column of the recovery table: one metric, or several that share a cell."""

    metrics: tuple[Metric, ...]

    def title(self, progress_unit: str = "step") -> str:
        return self.metrics[0].column_title(progress_unit)

    def cell(self, rec: Recovery) -> str:
        first, *rest = self.metrics
        if first.phase and first.key in rec.not_applicable:
            return "n/a"  # did not apply to this recovery (``-`` is: not observed)
        last = first.of(rec)
        text = first.format(last)
        for i, m in enumerate(rest):  # the second always; later ones when known and changed
            value = m.of(rec)
            if i == 0 or (value is not None and value != last):
                text += f" -> {m.format(value)}"
                last = value
        return text


def columns() -> tuple[Column, ...]:
    """The table's columns, from the metric declarations (``table``, ``column``)."""
    out: list[Column] = []
    for m in (m for m in recovery.METRICS if m.table):
        if out and m.column is not None and out[-1].metrics[-1].column == m.column:
            out[-1] = Column((*out[-1].metrics, m))
        else:
            out.append(Column((m,)))
    return tuple(out)


def header(progress_unit: str = "step") -> list[str]:
    return ["fault", "target", *(c.title(progress_unit) for c in columns())]


def row(kind: str, target: str | None, rec: Recovery) -> list[str]:
    return [kind, str(target), *(c.cell(rec) for c in columns())]


def aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as text columns, the first row a header underlined with dashes."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for i, r in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def notes(recoveries: Iterable[Recovery]) -> list[str]:
    """Why a metric is empty, per fault (Recovery.missing)."""
    return [f"{r.fault_kind} on {r.target}: {why}" for r in recoveries for why in r.missing]


def remarks(recoveries: Iterable[Recovery], placement: dict[str, object] | None = None) -> list[str]:
    """How each recovery went and what its numbers leave out (Recovery.notes), and how
    the local platform placed the job on GPUs (report.json ``placement``)."""
    out = [f"GPUs: {placement['note']}"] if placement and placement.get("note") else []
    return out + [f"{r.fault_kind} on {r.target}: {note}" for r in recoveries for note in r.notes]
