"""CI gates over an audit's runs: a floor on goodput and a ceiling on what one interruption may cost.

``elastic-chaos audit --goodput-at-least 0.95 --max-cost-per-interruption 50`` exits 1 when a run
breaks a gate, with one line per breach naming the run (its folder), the fault where it is a
fault's figure, and the figure against the gate. Only runs that judge their hypothesis are gated
(a run listed apart, not steady or a toolkit error, made no experiment). A figure a gate needs and
the run does not have breaks the gate (a gate passes on evidence, never on its absence): a run
whose goodput was not measured, an interruption whose cost is not known (no regain time). The
figures are the run's own (report.json: ``goodput``, each fault's ``cost.cost_usd``), or the
audit's pricing where it was given one (elastic_chaos.reporting.audits.audit.summarize_run).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from elastic_chaos.analysis.cost import FaultCost, interrupts
from elastic_chaos.errors import SpecError
from elastic_chaos.events import node_name
from elastic_chaos.options import option, validate
from elastic_chaos.reporting.audits.audit import RunSummary


@dataclass(frozen=True)
class Gates:
    """What a run must show for the audit to pass (docs/REPORTS.md, "Audit gates")."""

    goodput_at_least: float | None = option(None, "exit 1 when a run's goodput (its whole run's: useful step time / "
                                                  "wall time) is below this share, naming the run", minimum=0,
                                            maximum=1)
    max_cost_per_interruption: float | None = option(
        None, "exit 1 when one interruption of a run cost more than this many US dollars (its cost as the run was "
              "given it, or as priced by --gpus-per-node/--gpu-hour-price/--instance-type here), naming the run "
              "and the fault", minimum=0, maximum=1e9, units=" USD")

    def __post_init__(self) -> None:
        validate(self)


@dataclass(frozen=True)
class Breach:
    """One figure that broke a gate."""

    folder: str
    what: str

    def describe(self) -> str:
        return f"{self.folder}: {self.what}"

    def to_json(self) -> dict[str, str]:
        return {"run": self.folder, "breach": self.what}


def breaches(runs: Sequence[RunSummary], gates: Gates) -> list[Breach]:
    """Every figure of ``runs`` that breaks ``gates`` (the module docstring). Raises SpecError when the
    cost gate is asked for and no run holds a price (nothing to judge it on: a usage error)."""
    judged = [r for r in runs if r.judged]
    out: list[Breach] = []
    if gates.goodput_at_least is not None:
        out += [b for r in judged if (b := _goodput(r, gates.goodput_at_least)) is not None]
    if gates.max_cost_per_interruption is not None:
        priced = [c for r in judged for f in r.faults if (c := _cost(f.measured)) is not None and c.gpu_hour_price]
        if not priced:
            raise SpecError("--max-cost-per-interruption needs a price: no run was given one; give "
                            "--gpus-per-node N with --gpu-hour-price USD (or --instance-type TYPE) to price them here")
        for r in judged:
            out += _costs(r, gates.max_cost_per_interruption)
    return out


def _goodput(run: RunSummary, floor: float) -> Breach | None:
    if run.goodput is None:
        return Breach(str(run.folder), f"goodput was not measured (--goodput-at-least {floor:g} needs it)")
    if run.goodput < floor:
        return Breach(str(run.folder), f"goodput {run.goodput:.4g} ({run.goodput:.1%}) is below --goodput-at-least "
                                       f"{floor:g}")
    return None


def _cost(measured: Mapping[str, Any]) -> FaultCost | None:
    value = measured.get("cost")
    return value if isinstance(value, FaultCost) else None


def _costs(run: RunSummary, ceiling: float) -> list[Breach]:
    out = []
    for i, f in enumerate(run.faults):
        if not interrupts(f.measured):
            continue
        where = f"fault {i} ({f.record.fault} on {node_name(f.record.target)})"
        cost = _cost(f.measured)
        if cost is None or cost.cost_usd is None:
            why = "; ".join(cost.missing) if cost is not None and cost.missing else "the run was given no price"
            out.append(Breach(str(run.folder), f"{where}: its cost is not known ({why})"))
        elif cost.cost_usd > ceiling:
            out.append(Breach(str(run.folder), f"{where}: one interruption cost ${cost.cost_usd:,.2f} "
                                               f"({cost.gpu_hours:g} GPU-h), above --max-cost-per-interruption "
                                               f"${ceiling:,.2f}"))
    return out
