"""Metric groups: each kind of measurement a report shows, declared once, and the registry of them.

A group says what it measures and where it applies; everything that shows metrics
iterates the groups instead of naming them (report.json, the terminal, HTML and
Markdown tables, JUnit properties, the audit, metrics.prom). A group is:

- ``name`` (and ``key``, its report.json key when that differs: recovery's is ``metrics``),
- the fault kinds it applies to (``faults``; empty: every fault) — the one place a fault
  kind picks metrics,
- its value class, a dataclass whose declared fields are its metrics (elastic_chaos.analysis.metrics:
  label, unit, help, and where each shows), with ``to_json`` and a reader,
- ``measure``: the value from a timeline,
- its Prometheus family prefix (``prom``), its table's title, and the groups whose table
  row it replaces for its faults (``instead_of``: a slow node is no failure to recover from).

``FaultGroup`` measures one fault (``FaultMark``: what, where, when, its window);
``RunGroup`` measures a whole run (a replayed trace). Adding a group is one
declaration and one ``register`` call (elastic_chaos.analysis.registry; docs/ARCHITECTURE.md,
"Where to add ...").
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from elastic_chaos.analysis.metrics import Metric, declared
from elastic_chaos.events import Event


class GroupValue(Protocol):
    """What a group measures: metrics as attributes, a JSON object, what is missing."""

    missing: list[str]

    def to_json(self) -> dict[str, Any]: ...


V = TypeVar("V", bound=GroupValue)


@dataclass(frozen=True)
class FaultMark:
    """One fault as the analysis sees it: its name and target, when it hit, the detail its
    record keeps (a straggler's factor, a hung rank's pid), and the window its measure may use."""

    fault: str
    """The fault's name (``kill-node``), as FaultRecord.fault and Recovery.fault name it."""
    target: str | None
    injected_at: float
    detail: Mapping[str, Any] = field(default_factory=dict)
    until: float | None = None
    """The next independent fault (its recovery window's end); None: the end of the evidence."""
    max_restarts: int | None = None
    """The job's restart budget (each agent's)."""
    unit: str = "step"
    """What the job's progress counts (a script's ``--unit``: epoch, iteration, ...): the words of notes."""


@dataclass(frozen=True)
class RunMark:
    """A whole run as the analysis sees it (for run groups)."""

    checkpoint_every: int | None = None


@dataclass(frozen=True)
class _Group(Generic[V]):
    name: str
    title: str
    """What its table is headed with (the terminal, report.html, summary.md)."""
    value: type[V]
    key_: str | None
    prom_: str | None
    metrics_: tuple[Metric, ...] | None

    @property
    def key(self) -> str:
        """Its key in report.json (under each fault, or at the top for a run group)."""
        return self.key_ or self.name

    @property
    def prom(self) -> str:
        """Its Prometheus families' prefix: ``elastic_chaos_<prom>_<metric>``."""
        return self.prom_ or self.name

    @property
    def metrics(self) -> tuple[Metric, ...]:
        """Its metrics, in declaration order."""
        return self.metrics_ if self.metrics_ is not None else declared(self.value)

    def shown(self, where: str) -> tuple[Metric, ...]:
        """Its metrics declared to show ``where`` (table, audit, junit, failure)."""
        return tuple(m for m in self.metrics if getattr(m, where))


@dataclass(frozen=True)
class FaultGroup(_Group[V]):
    """A group measured once per fault (see the module docstring)."""

    measure: Callable[[Sequence[Event], FaultMark], V | None] = lambda events, mark: None
    read: Callable[[FaultMark, Mapping[str, Any]], V] | None = None
    faults: frozenset[str] = frozenset()
    """The fault kinds it applies to; empty: every fault."""
    instead_of: tuple[str, ...] = ()
    """Groups whose table row this group's row replaces, for the faults it applies to."""
    derive: Callable[[Sequence[Event], FaultMark, Mapping[str, Any]], V | None] | None = None
    """Instead of ``measure``: a value derived from the groups measured before it on the same fault
    (by group name; the cost of an interruption from its recovery), so nothing is measured twice."""

    def applies(self, kind: str) -> bool:
        return not self.faults or kind in self.faults


@dataclass(frozen=True)
class RunGroup(_Group[V]):
    """A group measured once per run (see the module docstring)."""

    measure: Callable[[Sequence[Event], RunMark], V | None] = lambda events, mark: None
    read: Callable[[Mapping[str, Any]], V] | None = None


def fault_group(name: str, title: str, value: type[V], *, measure: Callable[[Sequence[Event], FaultMark], V | None],
                read: Callable[[FaultMark, Mapping[str, Any]], V], faults: Iterable[str] = (),
                key: str | None = None, prom: str | None = None, metrics: tuple[Metric, ...] | None = None,
                instead_of: Iterable[str] = (),
                derive: Callable[[Sequence[Event], FaultMark, Mapping[str, Any]], V | None] | None = None
                ) -> FaultGroup[V]:
    """Declare a per-fault group (register it with ``register``)."""
    return FaultGroup(name, title, value, key, prom, metrics, measure, read, frozenset(faults), tuple(instead_of),
                      derive)


def run_group(name: str, title: str, value: type[V], *, measure: Callable[[Sequence[Event], RunMark], V | None],
              read: Callable[[Mapping[str, Any]], V], key: str | None = None, prom: str | None = None,
              metrics: tuple[Metric, ...] | None = None) -> RunGroup[V]:
    """Declare a per-run group (register it with ``register``)."""
    return RunGroup(name, title, value, key, prom, metrics, measure, read)
