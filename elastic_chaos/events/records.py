"""What a fault hit, as a typed record: the platform's side (``Hit``) and the run's (``FaultRecord``).

Faults make them (elastic_chaos.faults), the runner keeps them, the analysis measures each fault from
its record and the timeline, and report.json writes them: they sit below all of those, beside
the events whose ``fault/injected`` payload a record reads and writes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from elastic_chaos.events.fault_events import FaultEv, Injected, Observed
from elastic_chaos.events.payload import payload_json
from elastic_chaos.events.timeline import Event


@dataclass(frozen=True)
class Hit:
    """What a fault actually touched: the platform's side of a fault record."""

    node: str
    at: float
    action: str
    pids: tuple[int, ...] = ()
    detail: dict[str, Any] = field(default_factory=dict)

    def ended_at(self) -> float:
        """When the node it hit was gone: at once for a kill; for SIGTERM, when its processes exited
        (``exited_within_grace_s``), else when the grace ran out and SIGKILL followed."""
        within, grace = self.detail.get("exited_within_grace_s"), self.detail.get("grace_s")
        if isinstance(within, (int, float)) and not isinstance(within, bool):
            return self.at + float(within)
        if self.action == "sigterm-then-sigkill" and isinstance(grace, (int, float)) and not isinstance(grace, bool):
            return self.at + float(grace)
        return self.at



@dataclass(frozen=True)
class FaultRecord:
    """What a fault hit, when, and its detail; report.json writes its ``fault`` as ``kind``."""

    fault: str
    """The fault's name (``kill-node``)."""
    target: str | None
    injected_at: float
    """When the fault hit (for a spot interruption: the SIGTERM, not the notice)."""
    hit: Hit | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    """The fault's own facts (its options, what it measured): shown, never read as control."""
    trigger: str | None = None
    """The event-trigger that fired it (an armed fault), None when injected at once: a triggered fault
    (a cascade) is measured as part of the recovery it interrupted."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.fault, "target": self.target,
                               "injected_at": round(self.injected_at, 6), **self.detail}
        if self.trigger is not None:
            out["trigger"] = self.trigger
        if self.hit is not None:
            out["hit"] = {"action": self.hit.action, "pids": list(self.hit.pids), **self.hit.detail}
        return out

    def event_payload(self) -> Injected:
        """The ``fault/injected`` event's payload: the fault, what it hit, and its detail."""
        return Injected.read({**{k: v for k, v in self.to_json().items() if k not in ("kind", "target", "injected_at")},
                              "fault": self.fault})

    @classmethod
    def from_event(cls, e: Event[Injected] | Event[Observed]) -> FaultRecord:
        """The record a ``fault/injected`` event (or a watch's ``fault/observed``) holds."""
        entry: dict[str, Any] = {**{k: v for k, v in payload_json(e.data).items() if k != "fault"},
                                 "kind": e.data.fault, "target": e.node, "injected_at": e.t}
        if e.type == FaultEv.OBSERVED:
            entry["observed"] = True
        return cls.from_json(entry)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> FaultRecord:
        """A record as report.json holds it (``to_json``); keys besides kind, target,
        injected_at and hit are its detail (``metrics`` aside: the report's, not the record's)."""
        target = raw.get("target")
        target = None if target is None else str(target)
        at = raw.get("injected_at")
        at = float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else 0.0
        hit = raw.get("hit")
        made = None
        if isinstance(hit, dict):
            extra = {k: v for k, v in hit.items() if k not in ("action", "pids")}
            made = Hit(node=target or "", at=at, action=str(hit.get("action", "")),
                       pids=tuple(int(p) for p in hit.get("pids") or []), detail=extra)
        detail = {k: v for k, v in raw.items()
                  if k not in ("kind", "target", "injected_at", "hit", "metrics", "trigger")}
        trigger = raw.get("trigger")
        return cls(str(raw.get("kind", "unknown")), target, at, made, detail,
                   trigger=None if trigger is None else str(trigger))
