"""Fault events (faults/api.py, ChaosRun, the ledger) and losses observed by ``elastic-chaos watch``."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from elastic_chaos.events.payload import Payload
from elastic_chaos.events.types import Source, event_type


@dataclass(frozen=True, kw_only=True)
class Planned(Payload):
    fault: str
    """The fault's name (``kill-node``)."""
    actions: tuple[str, ...] = ()
    """What it is about to do, in words."""


@dataclass(frozen=True, kw_only=True)
class Armed(Payload):
    fault: str
    trigger: str | None = None
    """The trigger it waits for, in words."""


@dataclass(frozen=True, kw_only=True)
class Triggered(Armed):
    by: Mapping[str, Any] | None = None
    """The event that matched: its ``source``, ``kind`` and ``t``."""


@dataclass(frozen=True, kw_only=True)
class Injected(Payload):
    """A fault hit. Its record's detail (a straggler's ``factor``, a hung rank's ``pid``, an FIS
    experiment's states, ...) rides in ``extra`` (``detail``), as report.json's fault entry has it."""

    fault: str
    hit: Mapping[str, Any] | None = None
    """What the platform touched: ``action``, ``pids`` and its own detail."""
    trigger: str | None = None
    """The trigger that fired it (an armed fault: part of the recovery it interrupted)."""

    @property
    def detail(self) -> Mapping[str, Any]:
        """The fault record's detail: every field but fault, hit and trigger."""
        return self.extra


@dataclass(frozen=True, kw_only=True)
class Reverted(Payload):
    fault: str | None = None
    action: str | None = None


@dataclass(frozen=True, kw_only=True)
class Skipped(Payload):
    reason: str | None = None
    replay_index: int | None = None


@dataclass(frozen=True, kw_only=True)
class Replayed(Payload):
    """One preemption of a replayed trace (hypotheses/replay.py)."""

    index: int | None = None
    offset_s: float | None = None
    """Its offset in the trace."""
    due_at: float | None = None
    """When it came due here (the offset compressed)."""
    trace_node: str | None = None
    trace_group: str | None = None
    slot: int | None = None
    outcome: str | None = None
    """``injected`` or ``skipped``."""
    injected_at: float | None = None
    late_s: float | None = None
    reason: str | None = None
    """Why it was skipped."""


@dataclass(frozen=True, kw_only=True)
class FisState(Payload):
    status: str | None = None
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class Observed(Payload):
    fault: str
    id: str | None = None
    """The lost participant's rendezvous id."""
    timed_by: str | None = None
    noticed_at: float | None = None


class FaultEv:
    """Faults (faults/api.py, ChaosRun) and losses observed by ``elastic-chaos watch``."""

    PLANNED = event_type(Source.FAULT, "planned", Planned)
    """A fault resolved its target (``actions``: what it is about to do); emitted by Fault.inject."""
    ARMED = event_type(Source.FAULT, "armed", Armed)
    """A fault waits for its trigger (ChaosRun.arm)."""
    TRIGGERED = event_type(Source.FAULT, "triggered", Triggered)
    """An armed fault's trigger matched (``by``: the matching event); ChaosRun's armed fault."""
    INJECTED = event_type(Source.FAULT, "injected", Injected)
    """The fault hit, timed at the instant it hit (Fault.inject). Every recovery is measured from one."""
    REVERTED = event_type(Source.FAULT, "reverted", Reverted)
    """A fault was undone (heal, thaw, store restarted); Fault.revert."""
    SKIPPED = event_type(Source.FAULT, "skipped", Skipped)
    """A repeated fault was not fired: too few nodes alive (ChaosRun.repeat)."""
    REPLAYED = event_type(Source.FAULT, "replayed", Replayed)
    """A replayed trace's preemption came due; hypotheses/replay.py."""
    FIS_STATE = event_type(Source.FAULT, "fis_state", FisState)
    """An AWS FIS experiment changed state (faults/aws.py)."""
    OBSERVED = event_type(Source.FAULT, "observed", Observed)
    """A watch saw a participant leave the rendezvous (``fault: node-lost``), timed at its last
    heartbeat; the watch's stand-in for ``injected`` (cli/watching.py LossDetector)."""
