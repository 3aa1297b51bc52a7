"""The fault contract: a dry-run ``plan()``, an ``inject()`` that says what it hit.

Modelled on torchx's ``submit_dryrun``: ``plan()`` resolves the target and
describes every action without touching anything; ``inject()`` performs them
and returns a FaultRecord (chaostoolkit's activity record, typed). Faults
with an undo (heal, thaw) implement ``revert()``; scenario fixtures call it in
teardown so a failed test still heals what it broke.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from chaos.events import Timeline
from chaos.platforms.api import Hit, Platform


@dataclass(frozen=True)
class FaultPlan:
    kind: str
    target: str | None
    actions: tuple[str, ...]
    """Human-readable steps ``inject()`` would take, in order."""

    def describe(self) -> str:
        return f"{self.kind} -> {self.target}: " + "; ".join(self.actions)


@dataclass(frozen=True)
class FaultRecord:
    kind: str
    target: str | None
    injected_at: float
    hit: Hit | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "target": self.target,
                               "injected_at": round(self.injected_at, 6), **self.detail}
        if self.hit is not None:
            out["hit"] = {"action": self.hit.action, "pids": list(self.hit.pids), **self.hit.detail}
        return out


class Fault(abc.ABC):
    kind: str = "abstract"
    description: str = ""

    @abc.abstractmethod
    def plan(self, platform: Platform) -> FaultPlan:
        """Resolve targets and describe the actions; touches nothing."""

    @abc.abstractmethod
    def _inject(self, platform: Platform, plan: FaultPlan) -> FaultRecord: ...

    def inject(self, platform: Platform, timeline: Timeline) -> FaultRecord:
        """Perform the plan; record it on the timeline; return what was hit."""
        plan = self.plan(platform)
        timeline.emit("fault", "planned", plan.target, fault=self.kind, actions=list(plan.actions))
        record = self._inject(platform, plan)
        timeline.emit("fault", "injected", record.target, t=record.injected_at, fault=self.kind,
                      **{k: v for k, v in record.to_json().items() if k not in ("kind", "target", "injected_at")})
        return record

    def revert(self, platform: Platform, timeline: Timeline) -> None:  # noqa: B027 - optional hook
        """Undo the fault where that means something; the default has nothing to undo."""


def pick_victim(platform: Platform, explicit: str | None = None) -> str:
    """The node a fault aims at: ``explicit`` if given, else the newest live node
    (never the first, so a c10d store host is only hit when asked for)."""
    alive = platform.alive_nodes()
    if explicit:
        return explicit
    if not alive:
        from chaos.errors import InjectionFailed
        raise InjectionFailed("no live node to aim at")
    return alive[-1].name
