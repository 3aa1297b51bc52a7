"""Turn a timeline into recovery metrics (DESIGN.md, "Metrics").

For a fault injected at F, with ``pre`` the highest step completed before F,
each metric of :class:`Recovery` is declared once, with its unit, label, the
instants it spans (its ``help``) and where it shows (elastic_chaos.analysis.metrics);
``METRICS`` lists them, the phases first. The phases detect / rendezvous /
restart / retrain are the consecutive gaps between the instants F, first
detection, rendezvous complete, first step of a restarted worker and progress
regained, so they add up to ``regain_s``. A metric whose evidence is missing
is ``None`` and ``missing`` says why: nothing is guessed.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import Any

from elastic_chaos.analysis.metrics import Metric, Unit, declared, metric, phase
from elastic_chaos.events import (
    Event,
    node_name,
    payload_json,
)

_SHOWN = {"table": True, "audit": True, "junit": True, "failure": True}

PHASE_METRICS: tuple[Metric, ...] = (
    phase("detect", "fault -> first sign a survivor noticed it (its collective failed, an agent on another "
                    "node saw a worker fail or restarted, or the rendezvous changed)", **_SHOWN),
    phase("exit", "-> the worker whose collective failed exited on its own (on NCCL only after "
                  "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC); n/a when no survivor's collective failed or its "
                  "agent stopped it first", **_SHOWN),
    phase("shutdown", "-> the agent killed a worker that ignored SIGTERM for its whole shutdown wait (30 s in "
                      "torch 2.13); n/a when every worker stopped in time", **_SHOWN),
    phase("rendezvous", "-> the next rendezvous round is complete", **_SHOWN),
    phase("restart", "rendezvous complete -> first step completed by a worker started after the fault",
          **_SHOWN),
    phase("retrain", "first step of a restarted worker -> progress passes the pre-fault step (the steps "
                     "trained again)", **_SHOWN),
    phase("stall", "fault -> progress passes the pre-fault step when the fault ended on its own (a thaw, a "
                   "heal) and the same workers trained on at the same world size: no other phase applies",
          **_SHOWN),
)
PHASES = tuple(p.key for p in PHASE_METRICS)

_S, _STEPS, _N = Unit.SECONDS, Unit.STEPS, Unit.COUNT


class RecoveryPath(enum.Enum):
    """How training got back past the pre-fault step."""

    RESTART = "restart"
    """Workers were stopped and started again (a rendezvous round, a checkpoint restored)."""
    STALL = "stall"
    """The fault ended on its own and the same workers trained on at the same world size."""
    THROUGH = "through"
    """The same workers trained on through the fault, every node stepping at the same world
    size, no restart: a slowdown still in force when the next fault came or the run ended."""


@dataclass
class Recovery:
    """What one fault cost. Times are seconds from the fault; None = not observed."""

    fault: str
    target: str | None
    injected_at: float
    pre_step: int | None = metric("pre-fault step", _STEPS, "the highest step completed before the fault")
    detect_s: float | None = metric("detected", _S, "fault -> first sign a survivor noticed it", junit=True)
    rendezvous_s: float | None = metric("rendezvous complete", _S, "fault -> the next rendezvous round is "
                                        "complete", junit=True)
    recovery_s: float | None = metric("recovered", _S, "fault -> first step completed by a worker started "
                                      "after the fault", junit=True)
    regain_s: float | None = metric("regain", _S, "fault -> first step past the pre-fault step (progress "
                                    "fully regained)", table=True, audit=True, junit=True, failure=True)
    lost_steps: int | None = metric("lost {unit}s", _STEPS, "the pre-fault step - the step training resumed "
                                    "from", table=True, audit=True, junit=True, failure=True)
    resumed_from_step: int | None = metric("resumed from", _STEPS, "the step training resumed from (its "
                                           "checkpoint)", table=True, junit=True)
    world_size_before: int | None = metric("world size before", _N, "ranks training before the fault",
                                           table=True, column="world size", junit=True)
    world_size_after: int | None = metric("world size after", _N, "ranks of the first step after the fault",
                                          table=True, column="world size", junit=True)
    world_size_final: int | None = metric("world size final", _N, "ranks of the last step of the recovery "
                                          "window (shown when it differs from after)", table=True,
                                          column="world size", junit=True)
    replacement_s: float | None = metric("replacement", _S, "fault -> a replacement node is a participant "
                                         "of a complete round", table=True, junit=True)
    provision_s: float | None = metric("provision", _S, "where a lost machine is replaced: fault -> the "
                                       "replacement machine registered its Node (the autoscaler's delay, the "
                                       "instance's start)", junit=True)
    join_s: float | None = metric("join", _S, "replacement machine registered -> its Node is Ready", junit=True)
    rejoin_s: float | None = metric("rejoin", _S, "replacement machine Ready -> the replacement node is a "
                                    "participant of a complete round (the pod re-created, scheduled, started, "
                                    "admitted)", junit=True)
    saves_before: int | None = metric("saves before", _N, "checkpoints seen saved before the fault (reported by "
                                      "the script, or seen by the checkpoint file watcher)", junit=True)
    restarts_used: int = metric("restarts", _N, "the most worker-group restarts one agent spent after the "
                                "fault", default=0, table=True, junit=True)
    restarts_before: int = metric("restarts before", _N, "the most worker-group restarts one agent spent "
                                  "in warm-up (before the run's first fault): a steady job has spent none", default=0,
                                  junit=True)
    restart_budget: int | None = None
    """The job's max_restarts (each agent's budget)."""
    overtaken: bool = False
    """The next fault came before this one's recovery completed (its window ended first)."""
    notice_lead_s: float | None = None
    """Seconds from the interruption notice the departing node acted on (its agent stopped its workers
    and left the rendezvous: --leave-on-notice) to the fault's time, the termination; then every
    seconds figure here counts from the notice (``measured_from``), not from the termination. None:
    they count from the fault."""
    path: RecoveryPath | None = None
    """How training got back (None: it did not, yet)."""
    phases: dict[str, float | None] = field(default_factory=dict)
    not_applicable: dict[str, str] = field(default_factory=dict)
    """Phases that do not apply to this recovery, with why (their value is None, and not
    for want of evidence: that is ``missing``)."""
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the numbers leave out on purpose, and how the recovery went, in words."""
    unsettled_steps: int = 0
    """Steps left out of the pre-fault step: reported by a worker after its own collective
    had failed (see elastic_chaos.analysis.phases.unsettled_steps; ``notes`` names them)."""
    evidence: list[Event] = field(default_factory=list, repr=False)
    """The notable events from just before the fault to the regain: what a failed
    assertion on this recovery shows."""

    @property
    def measured_from(self) -> float:
        """When the seconds of this recovery start: the fault, or the notice the departing node acted
        on before it (``notice_lead_s``)."""
        return self.injected_at - (self.notice_lead_s or 0.0)

    @property
    def after_termination_s(self) -> float | None:
        """Where the departing node acted on the notice: seconds from the termination to progress
        regained, 0.0 when it was regained before the termination (None: not acted on a notice, or
        not regained)."""
        if self.notice_lead_s is None or self.regain_s is None:
            return None
        return round(max(0.0, self.regain_s - self.notice_lead_s), 3)

    @property
    def recovered(self) -> bool:
        """Training went on: restarted workers completed a step, or the same workers
        trained on once the fault ended (a stall)."""
        return self.recovery_s is not None or self.path in (RecoveryPath.STALL, RecoveryPath.THROUGH)

    def applicable_phases(self) -> dict[str, float | None]:
        """The phases that apply to this recovery, in order (None: not observed)."""
        return {p: self.phases.get(p) for p in PHASES if p not in self.not_applicable}

    def to_json(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)
             if f.name not in ("fault", "target", "injected_at", "evidence")}
        d["phases"] = {k: _plain(v) for k, v in self.phases.items()}
        d["not_applicable"] = dict(self.not_applicable)
        d["missing"] = list(self.missing)
        d["notes"] = list(self.notes)
        d["path"] = self.path.value if self.path is not None else None
        return {k: _plain(v) for k, v in d.items()}

    @classmethod
    def from_json(cls, fault: str, target: str | None, injected_at: float, metrics: dict[str, Any]) -> Recovery:
        """A fault's report.json ``metrics`` read back (what ``to_json`` wrote). Tolerant of
        older or hand-made files: a metric that is absent or not a number reads as not observed."""
        values: dict[str, Any] = {m.key: v for m in FIELD_METRICS if (v := m.unit.read(metrics.get(m.key))) is not None}
        budget = Unit.COUNT.read(metrics.get("restart_budget"))
        phases = metrics.get("phases")
        path = metrics.get("path")
        return cls(fault=fault, target=target, injected_at=injected_at, **values,
                   restart_budget=None if budget is None else int(budget), overtaken=metrics.get("overtaken") is True,
                   notice_lead_s=Unit.SECONDS.read(metrics.get("notice_lead_s")),
                   path=RecoveryPath(path) if path in {p.value for p in RecoveryPath} else None,
                   phases={p: Unit.SECONDS.read(phases.get(p)) for p in PHASES} if isinstance(phases, dict) else {},
                   not_applicable=_not_applicable(metrics),
                   missing=[m for m in metrics.get("missing") or [] if isinstance(m, str)],
                   notes=[m for m in metrics.get("notes") or [] if isinstance(m, str)],
                   unsettled_steps=int(Unit.COUNT.read(metrics.get("unsettled_steps")) or 0))

    def explain(self) -> str:
        """The timeline slice around this fault, one line per notable event."""
        lines = [f"{self.fault} on {node_name(self.target)} at t0={self.injected_at:.3f}:"]
        lines += [f"  {e.t - self.injected_at:+8.3f}s  {e.type}  {e.node or ''}  "
                  f"{_brief(payload_json(e.data))}" for e in self.evidence]
        lines += [f"  missing: {m}" for m in self.missing]
        return "\n".join(lines)


FIELD_METRICS: tuple[Metric, ...] = declared(Recovery)
METRICS: tuple[Metric, ...] = (*PHASE_METRICS, *FIELD_METRICS)
"""Every metric, declared once (elastic_chaos.analysis.metrics): the phases, then Recovery's fields."""


def _not_applicable(metrics: dict[str, Any]) -> dict[str, str]:
    """report.json's ``not_applicable``; a phase a report does not record at all was not
    part of its breakdown (written before the phase existed: its phases add up without it)."""
    raw = metrics.get("not_applicable")
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    phases = metrics.get("phases")
    if not isinstance(phases, dict) or not phases:
        return {}
    return {p: "not recorded by the version that wrote this report" for p in PHASES if p not in phases}


def _plain(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return round(float(v), 3)
    return v


def _brief(data: dict[str, Any], limit: int = 140) -> str:
    text = ", ".join(f"{k}={v}" for k, v in data.items() if k not in ("samples", "participants_detail"))
    return text if len(text) <= limit else text[:limit - 3] + "..."
