"""results.json's "Rendezvous at scale" section as one typed value: what the sweep wrote, what RESULTS.md reads.

:class:`RdzvSection` is written by bench/rdzv/measure.py (the sweep, size by size, and the check against
real torchrun), completed by bench/results_file.py (the shipped figures and the findings, derived from the
sizes on every write) and read by the renderer (bench/render/rdzv.py) and the plot: every writer and reader
goes through :meth:`RdzvSection.from_json` / :meth:`~bench.json_record.JsonRecord.to_json`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from bench.json_record import JsonRecord, each, optional, read
from bench.local_nodes import NodesRun
from bench.rdzv.records import SizeResult
from bench.rdzv.validate import ValidationRow
from elastic_chaos.scale.figures import Figures

KEY = "rdzv_scale"
"""The section's key in results.json."""


def _sizes(raw: Mapping[str, Any]) -> dict[str, tuple[SizeResult, ...]]:
    return {backend: tuple(SizeResult.from_json(s) for s in sizes) for backend, sizes in raw.items()}


@dataclass(frozen=True)
class RdzvSection(JsonRecord):
    """The sweep's sizes per backend, the check against torchrun, and what was derived from them."""

    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"real", "resumed", "not_swept", "notes", "interrupted"})

    validation: tuple[ValidationRow, ...] = ()
    validated: str | None = None
    """When the check against real torchrun last ran."""
    date: str | None = None
    command: str | None = None
    sizes: dict[str, tuple[SizeResult, ...]] = field(default_factory=dict)
    figures: Figures | None = None
    """The shipped figures (elastic_chaos/scale/measured.json), derived from ``sizes`` on every write."""
    wall_s: float | None = None
    findings: tuple[str, ...] = ()
    """Derived from the figures on every write (bench/rdzv/findings.py)."""
    real: tuple[NodesRun, ...] | None = None
    """The scale bench's real jobs measured for the check only (``--scale-rdzv``: the Scale table is kept)."""
    machine: str | None = None
    cores: int | None = None
    torch: str | None = None
    resumed: str | None = None
    """Which earlier sweep this one continued (``--rdzv-resume``), and the sizes it kept."""
    not_swept: str | None = None
    """The backends not swept this time, whose sizes were kept as measured."""
    notes: tuple[str, ...] | None = None
    """Hand-written notes on how an earlier sweep was put together (a new sweep drops them)."""
    interrupted: str | None = None
    """Set while a sweep runs: a sweep stopped midway keeps what it measured and says so."""
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False, kw_only=True)

    @property
    def swept(self) -> bool:
        """Whether it holds a sweep (what ``--rdzv-resume`` continues, what the figures are derived from)."""
        return bool(self.sizes)

    @property
    def unfinished_real(self) -> list[NodesRun]:
        """The real jobs behind the check that never trained at full size: nothing to compare."""
        return [r for r in self.real or () if not r.ok]

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RdzvSection:
        return cls(**read(cls, raw, validation=each(ValidationRow.from_json), sizes=_sizes,
                          figures=optional(Figures.from_json), findings=tuple, real=optional(each(NodesRun.from_json)),
                          notes=optional(tuple)))

    @classmethod
    def of(cls, results: Mapping[str, Any]) -> RdzvSection:
        """The section of a results.json (empty when it has none)."""
        return cls.from_json(results.get(KEY) or {})
