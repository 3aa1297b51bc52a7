"""Metrics declared once: a measured number's name, unit, label, meaning and where it shows.

A metric is declared where it is computed, as a field of
elastic_chaos.analysis.recovery.Recovery or as one of its phases::

    regain_s: float | None = metric("regain", Unit.SECONDS, "fault -> progress passes the pre-fault step",
                                    table=True, audit=True, junit=True, failure=True)

and everything that shows metrics derives from those declarations
(``recovery.METRICS``, in declaration order): the recovery table of the
terminal, report.html and summary.md (``table``; metrics sharing a ``column``
make one cell, world size before -> after -> final), the audit's percentiles
and regressions (``audit``), the JUnit properties of a scenario test
(``junit``), the line a failed scenario prints per fault (``failure``), and
the Measured values that let a failing ``assert recovery.regain_s < 30`` show
its timeline slice (every field metric). Adding a metric is one declaration
plus its computation.
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, Protocol

_KEY = "chaos.metric"


class Unit(enum.Enum):
    """What a metric counts, which says how it is written."""

    SECONDS = "s"
    """Seconds from the fault (or a phase's length): ``12.3s``."""
    STEPS = "steps"
    """Training steps, in the job's own progress unit (step, epoch, ...)."""
    COUNT = "count"
    """A plain count: ranks, restarts."""
    RATE = "steps/s"
    """Training steps per second: ``9.80/s``."""
    FRACTION = "fraction"
    """A share between 0 and 1, written as a percentage: ``49%``."""
    FACTOR = "factor"
    """A plain multiplier (a trace's time compression): ``60x``."""
    HOURS = "h"
    """Hours (a mean time between interruptions): ``24h``."""
    GPU_HOURS = "GPU-h"
    """GPU-hours (an interruption's cost in GPU time): ``1.23 GPU-h``."""
    USD = "USD"
    """US dollars: ``$12.34``."""
    USD_PER_GPU_HOUR = "USD/GPU-h"
    """US dollars per GPU-hour (a price): ``$4.10/GPU-h``."""
    MILLISECONDS = "ms"
    """Milliseconds (a network round trip, a delay): ``41.6 ms``."""
    MBIT_S = "Mbit/s"
    """Megabits per second (a link's rate): ``1.05 Mbit/s``."""

    def format(self, value: float | int | None) -> str:
        """``-`` for not observed; seconds to a tenth with ``s``; rates with ``/s``;
        fractions as percentages; counts as whole numbers."""
        if value is None:
            return "-"
        if self is Unit.SECONDS:
            return f"{float(value):.1f}s"
        if self is Unit.RATE:
            return f"{float(value):.2f}/s"
        if self is Unit.FRACTION:
            return f"{float(value):.0%}"
        if self is Unit.FACTOR:
            return f"{float(value):g}x"
        if self is Unit.HOURS:
            return f"{float(value):g}h"
        if self is Unit.GPU_HOURS:
            return f"{_upto4(value)} GPU-h"
        if self is Unit.USD:
            return f"${float(value):,.2f}"
        if self is Unit.USD_PER_GPU_HOUR:
            return f"${_upto4(value)}/GPU-h"
        if self is Unit.MILLISECONDS:
            return f"{float(value):.1f} ms"
        if self is Unit.MBIT_S:
            return f"{_upto4(value)} Mbit/s"
        return f"{value:g}" if isinstance(value, float) else str(value)

    @property
    def real(self) -> bool:
        """Whether values are real numbers (seconds, rates, fractions), not whole counts."""
        return self in (Unit.SECONDS, Unit.RATE, Unit.FRACTION, Unit.FACTOR, Unit.HOURS, Unit.GPU_HOURS, Unit.USD,
                        Unit.USD_PER_GPU_HOUR, Unit.MILLISECONDS, Unit.MBIT_S)

    def read(self, raw: Any) -> float | int | None:
        """A report.json value as this unit's type; None for anything that is not a number."""
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            return None
        return float(raw) if self.real else int(raw)


def _upto4(value: float) -> str:
    """Up to 4 decimals, as report.json keeps them: ``0.0915``, ``2.78``, ``1,234.5``."""
    return f"{float(value):,.4f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class Metric:
    """One declared metric (see the module docstring)."""

    key: str
    """Where it lives: the Recovery attribute and report.json ``metrics`` key
    (``regain_s``), or for a phase its name inside ``metrics.phases`` (``detect``)."""
    label: str
    """What people read (a table column, a line of a failure); ``{unit}`` stands for
    the job's progress unit (``lost {unit}s``: lost steps, lost epochs)."""
    unit: Unit
    help: str
    """What it measures, from which instant to which."""
    phase: bool = False
    """One of the consecutive phases that add up to the regain time."""
    table: bool = False
    """A column of the recovery table (terminal, report.html, summary.md)."""
    column: str | None = None
    """The table column it shares with the metrics declared next to it (default: its own)."""
    audit: bool = False
    """Aggregated by the audit (percentiles, regressions)."""
    junit: bool = False
    """A JUnit property of a scenario test (``chaos.fault0.<key>``)."""
    failure: bool = False
    """On the line a failed scenario prints for each fault."""

    @property
    def name(self) -> str:
        """The short name the audit uses (its JSON keys, its regressions): a phase's
        name, else the key without the ``_s`` of seconds (``regain``, ``lost_steps``)."""
        return self.key.removesuffix("_s") if self.unit is Unit.SECONDS and not self.phase else self.key

    @property
    def junit_key(self) -> str:
        """The property name after ``chaos.fault<i>.``: the key; ``phase.<name>_s`` for a phase."""
        return f"phase.{self.key}_s" if self.phase else self.key

    def title(self, progress_unit: str = "step") -> str:
        """The label, with the job's progress unit filled in."""
        return self.label.replace("{unit}", progress_unit)

    def column_title(self, progress_unit: str = "step") -> str:
        return (self.column or self.label).replace("{unit}", progress_unit)

    def of(self, recovery: Any) -> float | int | None:
        """This metric's value in ``recovery`` (an elastic_chaos.analysis.recovery.Recovery)."""
        if self.phase:
            value: float | int | None = recovery.phases.get(self.key)
            return value
        out: float | int | None = getattr(recovery, self.key)
        return out

    def format(self, value: float | int | None) -> str:
        return self.unit.format(value)


def metric(label: str, unit: Unit, help: str, *, default: Any = None, table: bool = False,
           column: str | None = None, audit: bool = False, junit: bool = False, failure: bool = False) -> Any:
    """A dataclass field that is a metric (the module docstring shows one)."""
    declared = Metric("", label, unit, help, table=table, column=column, audit=audit, junit=junit,
                      failure=failure)
    return dataclasses.field(default=default, metadata={_KEY: declared})


def phase(name: str, help: str, *, table: bool = False, audit: bool = False, junit: bool = False,
          failure: bool = False) -> Metric:
    """A recovery phase (seconds; the phases add up to the regain time), declared like a field metric."""
    return Metric(name, name, Unit.SECONDS, help, phase=True, table=table, audit=audit, junit=junit,
                  failure=failure)


def declared(cls: type) -> tuple[Metric, ...]:
    """The metrics declared as fields of the dataclass ``cls``, in field order."""
    return tuple(dataclasses.replace(f.metadata[_KEY], key=f.name)
                 for f in dataclasses.fields(cls) if _KEY in f.metadata)


class Explains(Protocol):
    """What a measured value belongs to (a Recovery): it can show where it was measured from."""

    def explain(self) -> str: ...


class Measured(float):
    """A measured seconds value that remembers which recovery it belongs to, so a
    failing ``assert recovery.regain_s < 30`` can show the timeline slice."""

    recovery: Explains | None = None
    metric: str = ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (float, (float(self),))


class MeasuredInt(int):
    """A measured count (lost steps, world size) that remembers its recovery."""

    recovery: Explains | None = None
    metric: str = ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (int, (int(self),))


def measured(value: float | int | None, owner: Explains, key: str) -> Any:
    """``value`` as a Measured (or MeasuredInt) of ``owner``'s metric ``key``; None stays None."""
    if value is None or isinstance(value, bool):
        return value
    out: Measured | MeasuredInt = MeasuredInt(value) if isinstance(value, int) else Measured(value)
    out.recovery, out.metric = owner, key
    return out


def count(n: int | None, unit: str) -> str:
    """``n`` of the job's progress ``unit`` in words: "1 epoch", "3 epochs", "an unknown number of steps"."""
    if n is None:
        return f"an unknown number of {unit}s"
    return f"{n} {unit}" + ("" if n == 1 else "s")
