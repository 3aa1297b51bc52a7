"""Turn a timeline into recovery metrics (DESIGN.md, "Metrics").

For a fault injected at F, with ``pre`` the highest step completed before F:

- ``detect_s``      F -> first sign the survivors noticed (an agent on another
                    node saw a worker fail or restarted, or the rendezvous changed)
- ``rendezvous_s``  F -> the next rendezvous round is complete
- ``recovery_s``    F -> first step completed by a worker started after F
- ``regain_s``      F -> first step > ``pre`` (progress fully regained)
- ``lost_steps``    ``pre`` - the step training resumed from
- ``replacement_s`` F -> a replacement node is a participant of a complete round

The phases detect / rendezvous / restart / replay are the consecutive gaps
between those instants and add up to ``regain_s``. A metric whose evidence is
missing is ``None`` and ``missing`` says why: nothing is guessed.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from chaos.events import Event

PHASES = ("detect", "rendezvous", "restart", "replay")

_DETECT_AGENT_KINDS = {"worker_failed", "worker_group_failed", "membership_change",
                       "rendezvous_started", "workers_stopping"}


@dataclass
class Recovery:
    """What one fault cost. Times are seconds from the fault; None = not observed."""

    fault_kind: str
    target: str | None
    injected_at: float
    pre_step: int | None = None
    detect_s: float | None = None
    rendezvous_s: float | None = None
    recovery_s: float | None = None
    regain_s: float | None = None
    lost_steps: int | None = None
    resumed_from_step: int | None = None
    replacement_s: float | None = None
    world_size_before: int | None = None
    world_size_after: int | None = None
    world_size_final: int | None = None
    restarts_used: int = 0
    phases: dict[str, float | None] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    @property
    def recovered(self) -> bool:
        return self.recovery_s is not None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("fault_kind", "target", "injected_at"):
            d.pop(k)
        d["phases"] = {k: _round(v) for k, v in self.phases.items()}
        return {k: _round(v) for k, v in d.items()}


def _round(v: Any) -> Any:
    return round(v, 3) if isinstance(v, float) else v


def _first(events: Iterable[Event], after: float, pred: Any) -> Event | None:
    for ev in events:
        if ev.t > after and pred(ev):
            return ev
    return None


def analyze_fault(events: Sequence[Event], *, kind: str, target: str | None,
                  injected_at: float, until: float | None = None) -> Recovery:
    """Metrics for the fault at ``injected_at``; ``until`` bounds world_size_final
    (the next fault's time in a multi-fault run)."""
    events = sorted(events, key=lambda e: e.t)
    f = injected_at
    rec = Recovery(fault_kind=kind, target=target, injected_at=f)
    steps = [e for e in events if e.source == "progress" and e.kind == "step"]
    before = [e for e in steps if e.t <= f]
    old_pids = {e.data.get("pid") for e in events if e.source == "progress" and e.t <= f}

    rec.pre_step = max((int(e.data["step"]) for e in before), default=0)
    if before:
        rec.world_size_before = int(before[-1].data.get("world_size", 0)) or None
    else:
        rec.missing.append("no step completed before the fault (no steady state)")

    detect = _first(events, f, lambda e: (e.source == "agent" and e.kind in _DETECT_AGENT_KINDS
                                          and e.node != target)
                    or (e.source == "rendezvous" and e.kind == "state"))
    rdzv = _first(events, f, lambda e: e.source == "rendezvous" and e.kind == "round_complete")
    if rdzv is None:  # no etcd watcher (c10d): fall back to the agents' own word
        rdzv = _first(events, f, lambda e: e.source == "agent" and e.kind == "rendezvous_complete"
                      and e.node != target)
    resumed = _first(events, f, lambda e: e.source == "checkpoint" and e.kind == "loaded")
    first_new = _first(steps, f, lambda e: e.data.get("pid") not in old_pids)
    regain = _first(steps, f, lambda e: e.data.get("pid") not in old_pids
                    and int(e.data["step"]) > (rec.pre_step or 0))
    if regain is None:  # the survivors never restarted (e.g. a node joined a live job)
        regain = _first(steps, f, lambda e: int(e.data["step"]) > (rec.pre_step or 0))

    rec.detect_s = _since(f, detect, "no survivor noticed the fault", rec)
    rec.rendezvous_s = _since(f, rdzv, "no rendezvous round completed after the fault", rec)
    rec.recovery_s = _since(f, first_new, "no restarted worker completed a step", rec)
    rec.regain_s = _since(f, regain, "progress never passed the pre-fault step", rec)
    if resumed is not None:
        rec.resumed_from_step = int(resumed.data.get("step", 0))
    elif first_new is not None:
        rec.resumed_from_step = int(first_new.data["step"]) - 1
        rec.missing.append("no checkpoint-loaded event: resume step inferred from the first step")
    if rec.resumed_from_step is not None and rec.pre_step is not None:
        rec.lost_steps = max(0, rec.pre_step - rec.resumed_from_step)
    if first_new is not None:
        rec.world_size_after = int(first_new.data.get("world_size", 0)) or None
    window = [e for e in steps if e.t > f and (until is None or e.t <= until)]
    if window:
        rec.world_size_final = int(window[-1].data.get("world_size", 0)) or None
    rec.replacement_s = _replacement(events, f, target, rec)
    rec.restarts_used = _restarts_used(events, f, until, target)
    rec.phases = _phases(f, detect, rdzv, first_new, regain)
    return rec


def _since(f: float, ev: Event | None, why: str, rec: Recovery) -> float | None:
    if ev is None:
        rec.missing.append(why)
        return None
    return ev.t - f


def _phases(f: float, *marks: Event | None) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    prev: float | None = f
    for name, ev in zip(PHASES, marks, strict=True):
        if ev is None or prev is None:
            out[name] = None
            prev = None
            continue
        out[name] = max(0.0, ev.t - prev)
        prev = max(prev, ev.t)
    return out


def _replacement(events: Sequence[Event], f: float, target: str | None, rec: Recovery) -> float | None:
    newcomers = {e.node for e in events if e.source == "node" and e.kind == "started"
                 and e.t > f and e.data.get("replaces") == target}
    if not newcomers:
        return None
    joined = _first(events, f, lambda e: e.source == "rendezvous" and e.kind == "round_complete"
                    and any(p.get("node") in newcomers for p in e.data.get("participants", [])))
    if joined is None:
        rec.missing.append("a replacement node started but never joined a complete round")
        return None
    return joined.t - f


def _restarts_used(events: Sequence[Event], f: float, until: float | None, target: str | None) -> int:
    per_node: dict[str | None, int] = {}
    for e in events:
        if (e.source == "agent" and e.kind == "worker_group_failed" and e.t > f
                and (until is None or e.t <= until) and e.node != target):
            per_node[e.node] = per_node.get(e.node, 0) + 1
    return max(per_node.values(), default=0)


def faults_in(events: Sequence[Event]) -> list[Event]:
    """The injected-fault events of a timeline, in time order."""
    return sorted((e for e in events if e.source == "fault" and e.kind == "injected"), key=lambda e: e.t)


def analyze(events: Sequence[Event]) -> list[Recovery]:
    """One Recovery per injected fault in the timeline."""
    faults = faults_in(events)
    out = []
    for i, fe in enumerate(faults):
        until = faults[i + 1].t if i + 1 < len(faults) else None
        out.append(analyze_fault(events, kind=str(fe.data.get("fault", fe.kind)), target=fe.node,
                                 injected_at=fe.t, until=until))
    return out
