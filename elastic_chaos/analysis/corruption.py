"""What a corrupted or damaged checkpoint was, and whether the job noticed it.

``corrupt-checkpoint`` (elastic_chaos.faults.corrupt: bits flipped in a save's tensor data) and
``damage-shard`` (elastic_chaos.faults.shard: one shard of a DCP save deleted or truncated) interrupt
nothing: they change a save the job already made. A recovery row for them (detect, regain, "no
survivor noticed the fault") would measure an interruption that never happened; the restart that
loads the save is its own fault (the worker crash the hypothesis injects after it) and has its own
recovery row. This group's row stands instead: the save hit, what was done to it, and the job's
reports that it is corrupt (a load error, a checksum) after the fault, from the timeline.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic_chaos.analysis.groups import FaultMark, fault_group
from elastic_chaos.analysis.metrics import Metric, Unit, declared, metric
from elastic_chaos.events import CheckpointEv, Event, of

CORRUPTION_FAULTS = frozenset({"corrupt-checkpoint", "damage-shard"})


@dataclass
class CorruptionCost:
    """A corrupted or damaged save (None: not recorded) and the job's reports of it."""

    target: str | None
    injected_at: float
    step: int | None = metric("save's step", Unit.COUNT, "the step of the save whose bits were flipped", table=True,
                              junit=True)
    bits: int | None = metric("bits flipped", Unit.COUNT, "bits flipped in its tensor data (corrupt-checkpoint)",
                              table=True, junit=True)
    reports: int | None = metric("corrupt reports", Unit.COUNT, "times the job reported that save corrupt after "
                                 "the fault (a load error, a checksum): 0 is a silent load", table=True, junit=True,
                                 failure=True)
    tensor: str | None = None
    """The tensor whose data was hit (corrupt-checkpoint)."""
    damage: str | None = None
    """What was done to the save, in words ("3 bit(s) of model.2.weight flipped", "rank 1's shard deleted")."""
    file: str | None = None
    missing: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {m.key: getattr(self, m.key) for m in METRICS}
        out.update({"tensor": self.tensor, "damage": self.damage, "file": self.file, "missing": list(self.missing)})
        return out

    @classmethod
    def from_json(cls, target: str | None, injected_at: float, raw: Mapping[str, Any]) -> CorruptionCost:
        values = {m.key: _int(m.unit.read(raw.get(m.key))) for m in METRICS}
        return cls(target, injected_at, tensor=_str(raw.get("tensor")), damage=_str(raw.get("damage")),
                   file=_str(raw.get("file")),
                   missing=[str(m) for m in raw.get("missing") or [] if isinstance(m, str)], **values)

    def describe(self) -> str:
        heard = ("the job never reported it corrupt (a silent load)" if self.reports == 0
                 else f"the job reported it corrupt {self.reports} time(s)")
        return f"{self.damage or 'damaged'} in step {self.step}'s save: {heard}"


METRICS: tuple[Metric, ...] = declared(CorruptionCost)


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def corruption_cost(events: Sequence[Event], *, target: str | None, injected_at: float,
                    detail: Mapping[str, Any]) -> CorruptionCost:
    """The CorruptionCost of the fault at ``injected_at`` whose record's ``detail`` names the save hit (its
    ``file``, and for a DCP shard the save's ``folder``: a report may name either)."""
    file, folder = _str(detail.get("file")), _str(detail.get("folder"))
    out = CorruptionCost(target, injected_at, step=_int(detail.get("step")), bits=_int(detail.get("bits")),
                         tensor=_str(detail.get("tensor")), file=file)
    if out.tensor is not None:
        out.damage = f"{out.bits} bit(s) of {out.tensor} flipped"
    elif detail.get("action") is not None:
        cut = detail.get("size_after")
        how = "deleted" if cut is None else f"truncated to {cut} of {detail.get('size_before')} bytes"
        out.damage = f"rank {detail.get('rank')}'s shard {how}"
    if file is None:
        out.missing.append("the record names no file: its corrupt reports cannot be counted")
        return out
    hit = {Path(p).resolve() for p in (file, folder) if p is not None}
    out.reports = sum(1 for e in of(events, CheckpointEv.CORRUPT, after=injected_at)
                      if e.data.path and Path(str(e.data.path)).resolve() in hit)
    return out


def _measure(events: Sequence[Event], mark: FaultMark) -> CorruptionCost:
    return corruption_cost(events, target=mark.target, injected_at=mark.injected_at, detail=mark.detail)


CORRUPTION = fault_group(
    "corruption", "Corrupted or damaged checkpoint", CorruptionCost, faults=CORRUPTION_FAULTS, prom="corruption",
    instead_of=("recovery",), measure=_measure,
    read=lambda mark, raw: CorruptionCost.from_json(mark.target, mark.injected_at, dict(raw)))
"""A corrupted or damaged save (report.json's ``corruption``): nothing was interrupted, so its row replaces
the recovery row for ``corrupt-checkpoint`` and ``damage-shard``."""
