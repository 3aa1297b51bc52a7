"""What an interruption costs in GPU-hours and money: the recovery's seconds turned into the bill.

Per fault, with ``G`` the GPUs the job held when the fault hit (the nodes before it: its world
size before / the job's worker processes per node, x ``--gpus-per-node``)::

    GPU-hours = regain_s x G / 3600          money = GPU-hours x --gpu-hour-price

``regain_s`` runs from the fault to the first step past the one reached before it, so it holds
the downtime (detect, rendezvous, restart) *and* the re-training of the lost steps (the
``retrain`` phase: lost steps x step time): the steps thrown away are counted once, by the time
it took to train them again, never a second time as lost steps x step time. Every GPU the job
held counts for the whole of it (the survivors wait, the lost node's work is re-done).

Per month, at an interruption rate: ``--mtbf-hours`` (mean hours between interruptions of the
job in production), or the rate of the trace a run replayed (its preemptions over its span, in
the trace's own time); a month is 730 hours (365 x 24 / 12).

The price is the user's ``--gpu-hour-price`` (US dollars), or an instance type's on-demand
price from :data:`PRICES`: a small table, dated and sourced, an example and never today's price.
Nothing is said that was not given: without GPUs no cost; with GPUs but no price, GPU-hours only.

The basis a run was given is recorded on its timeline (``runner/cost_basis``); :data:`COST` (a
fault group, derived from the fault's recovery) reads it there, so a run's report.json, its
tables and ``elastic-chaos report`` say the same; ``elastic-chaos audit`` may price runs anew
with a basis of its own (:func:`fault_cost`).
"""
from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from elastic_chaos.analysis.groups import FaultMark, fault_group
from elastic_chaos.analysis.metrics import Metric, Unit, declared, metric
from elastic_chaos.errors import SpecError
from elastic_chaos.events import Event, RunnerEv, last
from elastic_chaos.events.runner_events import CostBasisGiven, Phase
from elastic_chaos.options import option, validate

HOURS_PER_MONTH = 730.0
"""365 x 24 / 12."""

PRICES_SOURCE = ("AWS EC2 on-demand list price, us-east-1, Linux, as AWS published it in 2024: an example dated "
                 "2024, not today's price (AWS has changed GPU instance prices since); give --gpu-hour-price for "
                 "yours")
"""Where :data:`PRICES` come from, and when."""


@dataclass(frozen=True)
class InstancePrice:
    """One instance type of the bundled table: its GPUs and its on-demand price."""

    gpus: int
    gpu: str
    on_demand_usd_per_hour: float

    @property
    def gpu_hour_usd(self) -> float:
        return self.on_demand_usd_per_hour / self.gpus


class Instance(enum.Enum):
    """The instance types of the bundled price table."""

    P5_48XLARGE = "p5.48xlarge"
    P4D_24XLARGE = "p4d.24xlarge"
    G5_48XLARGE = "g5.48xlarge"
    G5_XLARGE = "g5.xlarge"
    G4DN_XLARGE = "g4dn.xlarge"


PRICES: Mapping[Instance, InstancePrice] = {
    Instance.P5_48XLARGE: InstancePrice(8, "H100 80GB", 98.32),
    Instance.P4D_24XLARGE: InstancePrice(8, "A100 40GB", 32.7726),
    Instance.G5_48XLARGE: InstancePrice(8, "A10G", 16.288),
    Instance.G5_XLARGE: InstancePrice(1, "A10G", 1.006),
    Instance.G4DN_XLARGE: InstancePrice(1, "T4", 0.526),
}
"""Instance type -> GPUs and on-demand price (:data:`PRICES_SOURCE`). Spot prices are not bundled: they
change by the hour and by zone; give a spot price as --gpu-hour-price."""


@dataclass(frozen=True)
class CostBasis:
    """What the job's GPUs cost in production: the options that turn an interruption's seconds into
    GPU-hours and money (``elastic-chaos run``, ``run_hypothesis(...)``, ``elastic-chaos audit``)."""

    gpus_per_node: int | None = option(None, "GPUs each node of the job holds in production: the report turns "
                                             "each interruption's regain time into GPU-hours", minimum=1,
                                       maximum=64)
    gpu_hour_price: float | None = option(None, "price of one GPU-hour in US dollars (on-demand or spot, yours): "
                                                "the report turns GPU-hours into money", above=0, maximum=1000,
                                          units=" USD")
    instance_type: Instance | None = option(None, "an instance type of the bundled price table (its GPUs per "
                                                  "node, and its 2024 us-east-1 on-demand price per GPU-hour "
                                                  "unless --gpu-hour-price is given; docs/REPORTS.md)")
    mtbf_hours: float | None = option(None, "mean hours between interruptions of the job in production: the "
                                            "report adds what they cost per month", above=0, maximum=1e6,
                                      units=" h")

    def __post_init__(self) -> None:
        validate(self)
        table = PRICES[self.instance_type] if self.instance_type is not None else None
        if table is not None and self.gpus_per_node is not None and self.gpus_per_node != table.gpus:
            raise SpecError(f"--gpus-per-node {self.gpus_per_node} contradicts --instance-type "
                            f"{self.instance_type.value if self.instance_type else ''} ({table.gpus} GPUs); "
                            "give one of them")

    @property
    def given(self) -> bool:
        """Whether anything was given (nothing: no cost is said)."""
        return any(v is not None for v in (self.gpus_per_node, self.gpu_hour_price, self.instance_type,
                                           self.mtbf_hours))

    def recorded(self) -> CostBasisGiven:
        """The basis as the timeline records it: GPUs and price resolved, with where the price comes from."""
        table = PRICES[self.instance_type] if self.instance_type is not None else None
        gpus = self.gpus_per_node if self.gpus_per_node is not None else table.gpus if table else None
        if self.gpu_hour_price is not None:
            price, source = self.gpu_hour_price, "given (--gpu-hour-price)"
        elif table is not None and self.instance_type is not None:
            price = round(table.gpu_hour_usd, 4)
            source = (f"{self.instance_type.value} on-demand, ${table.on_demand_usd_per_hour:g}/h for "
                      f"{table.gpus} {table.gpu}: {PRICES_SOURCE}")
        else:
            price, source = None, None
        return CostBasisGiven(gpus_per_node=gpus, gpu_hour_price=price, price_source=source,
                              instance_type=self.instance_type.value if self.instance_type else None,
                              mtbf_hours=self.mtbf_hours)


NAMES = frozenset(f for f in CostBasis.__dataclass_fields__)
"""The option names a cost basis takes (sorted out of a run's values by elastic_chaos.hypotheses.api)."""


@dataclass
class FaultCost:
    """What one interruption cost (the module docstring has the formula)."""

    gpus: int | None = metric("GPUs", Unit.COUNT, "GPUs the job held when the fault hit (nodes before it x GPUs "
                              "per node)", table=True)
    gpu_hours: float | None = metric("GPU-hours", Unit.GPU_HOURS, "regain time x GPUs: the GPU-hours the "
                                     "interruption cost (downtime and re-training the lost steps)", table=True,
                                     audit=True, junit=True)
    gpu_hour_price: float | None = metric("price", Unit.USD_PER_GPU_HOUR, "price of one GPU-hour (US dollars)",
                                          table=True)
    cost_usd: float | None = metric("cost", Unit.USD, "GPU-hours x price: what the interruption cost (US dollars)",
                                    table=True, audit=True, junit=True, failure=True)
    mtbf_hours: float | None = metric("MTBF", Unit.HOURS, "mean hours between interruptions (given, or the "
                                      "replayed trace's)", table=True)
    month_gpu_hours: float | None = metric("GPU-hours/month", Unit.GPU_HOURS, "GPU-hours x 730 / MTBF hours",
                                           table=True)
    month_cost_usd: float | None = metric("cost/month", Unit.USD, "cost x 730 / MTBF hours (US dollars)", table=True)
    price_source: str | None = None
    mtbf_source: str | None = None
    missing: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {**{m.key: getattr(self, m.key) for m in METRICS}, "price_source": self.price_source,
                "mtbf_source": self.mtbf_source, "missing": list(self.missing)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> FaultCost:
        values: dict[str, Any] = {m.key: m.unit.read(raw.get(m.key)) for m in METRICS}
        missing = raw.get("missing")
        return cls(**values, price_source=_text(raw.get("price_source")), mtbf_source=_text(raw.get("mtbf_source")),
                   missing=[str(w) for w in missing] if isinstance(missing, list) else [])

    def remarks(self) -> list[str]:
        """Where the price and the interruption rate come from (the same lines in every rendering)."""
        out = [f"price per GPU-hour: {self.price_source}"] if self.price_source else []
        return out + ([f"MTBF: {self.mtbf_source}"] if self.mtbf_source else [])


METRICS: tuple[Metric, ...] = declared(FaultCost)


def fault_cost(basis: CostBasisGiven, regain_s: float | None, world_size_before: int | None,
               nproc_per_node: int | None, trace_mtbf_hours: float | None = None) -> FaultCost | None:
    """One interruption's cost (the module docstring); None when the basis names no GPUs. A figure
    that cannot be known is None and ``missing`` says why."""
    if basis.gpus_per_node is None:
        return None
    out = FaultCost(gpu_hour_price=basis.gpu_hour_price, price_source=basis.price_source)
    nodes = None if world_size_before is None or not nproc_per_node else world_size_before / nproc_per_node
    if nodes is None or nodes != int(nodes):
        out.missing.append("cost: the job's nodes before the fault are not known, so neither are its GPUs")
        return out
    out.gpus = int(nodes) * basis.gpus_per_node
    if regain_s is None:
        out.missing.append("cost: no regain time was measured for this fault (its recovery says why), so "
                           "its cost is not known")
        return out
    gpu_hours, cost = idle_cost(regain_s, out.gpus, basis.gpu_hour_price)
    out.gpu_hours, out.cost_usd = round(gpu_hours, 4), None if cost is None else round(cost, 2)
    if cost is None:
        out.missing.append("cost: no --gpu-hour-price or --instance-type was given: GPU-hours only")
    out.mtbf_hours, out.mtbf_source = _rate(basis, trace_mtbf_hours)
    if out.mtbf_hours is not None:
        per_month = HOURS_PER_MONTH / out.mtbf_hours
        out.month_gpu_hours = round(gpu_hours * per_month, 4)
        out.month_cost_usd = None if cost is None else round(cost * per_month, 2)
    return out


def idle_cost(seconds: float, gpus: int, gpu_hour_price: float | None) -> tuple[float, float | None]:
    """(GPU-hours, US dollars or None without a price) of ``gpus`` GPUs held ``seconds`` without training:
    the one formula (a run's interruption, ``elastic-chaos scale``'s expected one); unrounded."""
    gpu_hours = seconds * gpus / 3600
    return gpu_hours, None if gpu_hour_price is None else gpu_hours * gpu_hour_price


def _rate(basis: CostBasisGiven, trace_mtbf_hours: float | None) -> tuple[float | None, str | None]:
    if basis.mtbf_hours is not None:
        return basis.mtbf_hours, "given (--mtbf-hours)"
    if trace_mtbf_hours is not None:
        return round(trace_mtbf_hours, 4), "the replayed trace's preemptions over its span (to its last preemption)"
    return None, None


def trace_mtbf_hours(events: Sequence[Event]) -> float | None:
    """The replayed trace's mean hours between preemptions, in the trace's own time: its span (to its last
    preemption, compressed as replayed) x its compression / its preemptions; None without a replay."""
    e = last(events, RunnerEv.PHASE, where=lambda e: e.data.phase == "replay")
    if e is None:
        return None
    p: Phase = e.data
    if not p.preemptions or not p.span_s or not p.compress:
        return None
    return float(p.span_s * p.compress / p.preemptions / 3600)


def basis_of(events: Sequence[Event]) -> CostBasisGiven | None:
    """The cost basis a run was given (its timeline's last ``runner/cost_basis``); None: none was."""
    e = last(events, RunnerEv.COST_BASIS)
    return e.data if e is not None else None


def _nproc(events: Sequence[Event]) -> int | None:
    started = last(events, RunnerEv.JOB_STARTED)
    spec = started.data.spec if started is not None else None
    n = spec.get("nproc_per_node", 1) if isinstance(spec, Mapping) else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def measure_cost(events: Sequence[Event], mark: FaultMark, measured: Mapping[str, Any]) -> FaultCost | None:
    """The cost of the fault ``mark`` from its recovery (already measured) and the run's basis."""
    basis = basis_of(events)
    recovery = measured.get("recovery")
    if basis is None or recovery is None or not interrupts(measured):
        return None
    return fault_cost(basis, recovery.regain_s, recovery.world_size_before, _nproc(events), trace_mtbf_hours(events))


def interrupts(measured: Mapping[str, Any]) -> bool:
    """Whether a fault (its groups' values by name) interrupted training: a slow node does not (its
    throughput group says what it cost)."""
    return "recovery" in measured and "throughput" not in measured


def _text(v: Any) -> str | None:
    return None if v is None else str(v)


COST = fault_group("cost", "What each interruption cost", FaultCost, measure=lambda events, mark: None,
                   derive=measure_cost, read=lambda mark, raw: FaultCost.from_json(raw))
"""Each fault's cost (report.json's ``cost`` under the fault; Prometheus ``elastic_chaos_cost_*``)."""
