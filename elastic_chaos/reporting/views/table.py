"""The tables of a run, the same in every rendering: the terminal, report.html and summary.md.

One table per metric group (elastic_chaos.analysis.groups) that measured something in the run.
A fault group's table has a row per fault it measured: the fault, its target, then the
group's metrics declared with ``table=True``, in declaration order, each titled with
its label; a fault whose row another group replaces (``instead_of``: a straggler's
step rates instead of a recovery) is left out of the replaced table. Metrics declared
with the same ``column`` share one cell, as a path: world size ``2 -> 1``, and ``-> 2``
after it when the final size differs (a later value shows only when it is known and
changed). A run group's table is its value's own (``table()``), or one row of its
table metrics.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from elastic_chaos.analysis.final_state import FOLDER as FINAL_STATE_FOLDER
from elastic_chaos.analysis.groups import FaultGroup, RunGroup
from elastic_chaos.analysis.metrics import Metric
from elastic_chaos.analysis.recovery_analysis import RECOVERY
from elastic_chaos.analysis.registry import fault_groups, run_groups
from elastic_chaos.analysis.result import FaultResult, RunResult
from elastic_chaos.events import node_name
from elastic_chaos.events.runner_events import GpuPlacement, Threads


@dataclass(frozen=True)
class Column:
    """One column of a table: one metric, or several that share a cell."""

    metrics: tuple[Metric, ...]

    def title(self, progress_unit: str = "step") -> str:
        return self.metrics[0].column_title(progress_unit)

    def cell(self, value: Any) -> str:
        first, *rest = self.metrics
        if first.phase and first.key in getattr(value, "not_applicable", {}):
            return "n/a"  # did not apply to this fault (``-`` is: not observed)
        last = first.of(value)
        text = first.format(last)
        for i, m in enumerate(rest):  # the second always; later ones when known and changed
            later = m.of(value)
            if i == 0 or (later is not None and later != last):
                text += f" -> {m.format(later)}"
                last = later
        return text


def columns(group: FaultGroup[Any] | RunGroup[Any] = RECOVERY) -> tuple[Column, ...]:
    """A group's columns, from its metric declarations (``table``, ``column``)."""
    out: list[Column] = []
    for m in group.shown("table"):
        if out and m.column is not None and out[-1].metrics[-1].column == m.column:
            out[-1] = Column((*out[-1].metrics, m))
        else:
            out.append(Column((m,)))
    return tuple(out)


def header(progress_unit: str = "step", group: FaultGroup[Any] = RECOVERY) -> list[str]:
    return ["fault", "target", *(c.title(progress_unit) for c in columns(group))]


def row(kind: str, target: str | None, value: Any, group: FaultGroup[Any] = RECOVERY) -> list[str]:
    return [kind, node_name(target), *(c.cell(value) for c in columns(group))]


@dataclass(frozen=True)
class Table:
    """One table of a run: what it is about, then a header row and the rows."""

    group: str
    title: str
    rows: list[list[str]]


def _replaced(f: FaultResult, group: FaultGroup[Any]) -> bool:
    """Whether another group measured on ``f`` shows instead of ``group``."""
    return any(group.name in g.instead_of and f.measured.get(g.name) is not None for g in fault_groups()
               if g is not group and g.applies(f.record.fault))


def shown_faults(result: RunResult, group: FaultGroup[Any] = RECOVERY) -> list[FaultResult]:
    """The faults with a row in ``group``'s table."""
    return [f for f in result.faults if f.measured.get(group.name) is not None and not _replaced(f, group)]


def tables(result: RunResult) -> list[Table]:
    """Every table of the run: the fault groups' (recovery first), then the run groups'."""
    out: list[Table] = []
    unit = result.progress_unit
    for g in fault_groups():
        faults = shown_faults(result, g)
        if faults and columns(g):
            out.append(Table(g.name, g.title, [header(unit, g)] + [row(f.record.fault, f.record.target,
                                                                         f.measured[g.name], g) for f in faults]))
    for rg in run_groups():
        value = result.measured.get(rg.name)
        if value is None:
            continue
        title = value.title() if hasattr(value, "title") else rg.title
        own = value.table() if hasattr(value, "table") else []
        rows = own or [[c.title(unit) for c in columns(rg)], [c.cell(value) for c in columns(rg)]]
        out.append(Table(rg.name, title, rows))
    return out


def aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as text columns, the first row a header underlined with dashes."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for i, r in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def notes(result: RunResult) -> list[str]:
    """Why a metric is empty, per fault and group shown (each value's ``missing``)."""
    out = []
    for g in fault_groups():
        for f in shown_faults(result, g):
            out += [f"{f.record.fault} on {node_name(f.record.target)}: {why}" for why in f.measured[g.name].missing]
    return out


def remarks(result: RunResult) -> list[str]:
    """Every remark of the run, the same lines in every rendering: how each recovery shown went and what
    its numbers leave out (Recovery.notes), how the local platform placed the job on GPUs (report.json
    ``placement``) and fitted its threads to the cores (``threads``), and what could and could not be seen
    of a user's script (``observation``'s notes)."""
    return [*setup_remarks(result.placement, result.threads),
            *(f"clock: {node}'s clock ran {abs(off):.1f} s {'ahead of' if off > 0 else 'behind'} the runner's "
              "(measured from its log lines' stamps against when they were written): its times are placed on the "
              f"runner's clock, {off:+.1f} s" for node, off in result.clock_offsets.items()),
            *(f"{f.recovery.fault} on {node_name(f.recovery.target)}: {note}" for f in shown_faults(result)
              for note in f.recovery.notes),
            *group_remarks(result),
            *(f"script: {note}" for note in (result.observation.notes if result.observation else ()))]


def group_remarks(result: RunResult) -> list[str]:
    """What a fault group's values say about where their inputs come from (a price's source), each
    line once: ``<group>: <line>``."""
    out: list[str] = []
    for g in fault_groups():
        for f in shown_faults(result, g):
            said = getattr(f.measured[g.name], "remarks", None)
            out += [line for line in (f"{g.name}: {r}" for r in (said() if callable(said) else []))
                    if line not in out]
    return out


def setup_remarks(placement: GpuPlacement | None = None, threads: Threads | None = None) -> list[str]:
    """How the local platform placed the job on GPUs and fitted its threads to the cores."""
    out = [f"GPUs: {placement.note}"] if placement is not None and placement.note else []
    return out + ([f"threads: {threads.advice}"] if threads is not None and threads.advice else [])


def final_state_lines(result: RunResult) -> list[str]:
    """The final-state comparison (``--compare-final``), in lines every rendering shows under its own title:
    the outcome, which reference and how it was compared, the first divergence and since when; [] where
    none was made."""
    fs = result.final_state
    if fs is None:
        return []
    lines = [f"{'equal' if fs.equal else 'diverged'}: {fs.differing} of {fs.compared} values differ at {fs.step} "
             f"(compared {fs.comparison})"]
    if fs.reference is not None:
        said = fs.reference.describe()
        lines.append(said[0].upper() + said[1:])
    if fs.first is not None:
        lines.append(f"first divergence: {fs.first.describe()}{fs.since}; likely cause: {fs.first.cause}")
    lines.append(f"the whole comparison: {FINAL_STATE_FOLDER}/comparison.json (the reference's log: "
                 f"{FINAL_STATE_FOLDER}/reference.log)")
    return lines
