"""When a fault fires: at a time, at a step, on an event, during a rendezvous.

Faults that matter most hit a job in a particular phase: while a checkpoint
is being written, while the survivors re-form their rendezvous after a
first failure. A Trigger is a predicate over timeline events; the run arms a
fault with one (``ChaosRun.arm``) and injects it from a thread the moment a
matching event is added, so the window is hit as it opens.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from elastic_chaos.events import AgentEv, CheckpointEv, Event, EventType, RdzvEv, field_value

REFORMING = frozenset({AgentEv.WORKER_GROUP_FAILED, AgentEv.RENDEZVOUS_STARTED, AgentEv.MEMBERSHIP_CHANGE})
"""What a survivor's agent says as it starts re-forming the rendezvous."""


@dataclass(frozen=True)
class Trigger:
    description: str
    matches: Callable[[Event], bool]

    def __str__(self) -> str:
        return self.description


def on_event(type: EventType, **data: Any) -> Trigger:
    """Fires on the first event of ``type`` whose data has the given values."""
    detail = "".join(f" {k}={v}" for k, v in data.items())
    return Trigger(f"on {type}{detail}",
                   lambda e: e.type == type and all(field_value(e.data, k) == v for k, v in data.items()))


def checkpoint_started(min_step: int = 1) -> Trigger:
    """Fires when a periodic checkpoint of ``min_step`` or later starts being written."""
    return Trigger(f"when a checkpoint (step >= {min_step}) starts being written",
                   lambda e: e.type == CheckpointEv.STARTED
                   and (e.data.step or 0) >= min_step and (e.data.reason or "periodic") == "periodic")


def checkpoint_saved(min_step: int = 1) -> Trigger:
    """Fires when a periodic checkpoint of ``min_step`` or later is durable (its ``checkpoint saved``)."""
    return Trigger(f"when a checkpoint (step >= {min_step}) is saved",
                   lambda e: e.type == CheckpointEv.SAVED
                   and (e.data.step or 0) >= min_step and (e.data.reason or "periodic") == "periodic")


def during_rendezvous(after: float = 0.0) -> Trigger:
    """Fires when, after time ``after``, a survivor starts re-forming the rendezvous
    (its worker group failed, or it is rendezvousing again)."""
    return Trigger("during a re-rendezvous",
                   lambda e: e.t > after and e.type in REFORMING)


def round_closed() -> Trigger:
    """Fires the moment a rendezvous round closes (the etcd watcher saw it complete): before
    the agents have exchanged the master address and their ranks through the round's store."""
    return Trigger("when a rendezvous round closes", lambda e: e.type == RdzvEv.ROUND_COMPLETE)
