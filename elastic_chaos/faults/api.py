"""The fault contract: a dry-run ``plan()``, an ``inject()`` that says what it hit.

Modelled on torchx's ``submit_dryrun``: ``plan()`` resolves the target and
describes every action without touching anything; ``inject()`` performs them
and returns a FaultRecord (chaostoolkit's activity record, typed). Faults
with an undo (heal, thaw, restart the store) implement ``revert()``; the run
calls it after ``duration_s`` when one is set, and always in teardown, so a
failed test still heals what it broke.
"""
from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ClassVar

from elastic_chaos.errors import InjectionFailed
from elastic_chaos.events import Event, FaultEv, Timeline
from elastic_chaos.events.fault_events import Planned, Reverted
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.options import validate
from elastic_chaos.platforms.api import Hit, Platform
from elastic_chaos.platforms.capabilities import Capability


@dataclass(frozen=True)
class FaultPlan:
    fault: str
    """The fault's name (``kill-node``)."""
    target: str | None
    actions: tuple[str, ...]
    """Human-readable steps ``inject()`` would take, in order."""

    def describe(self) -> str:
        return f"{self.fault} -> {self.target}: " + "; ".join(self.actions)


StopCheck = Callable[[], "str | None"]
"""Polled by a long-running fault: a reason (a game day's stop condition) ends it early."""


class Fault(abc.ABC):
    name: ClassVar[str] = "abstract"
    """The fault's name: what ``elastic-chaos run`` and report.json call it (``kill-node``)."""
    description: ClassVar[str] = ""
    requires: ClassVar[type[Capability] | None] = None
    """The platform capability this fault needs (None: any platform can do it)."""
    platforms: ClassVar[tuple[str, ...]] = ()
    """The platforms this class is made for; () = any platform with the capability
    (the fault is made through the Platform contract). Where two classes share a kind
    (the local stand-in and AWS FIS for ``spot-interruption``), the one made for the
    platform wins (elastic_chaos.faults.catalog)."""
    duration_s: float | None = None
    """Seconds after which the run reverts the fault by itself (None: until teardown)."""

    def __post_init__(self) -> None:
        """Every dataclass fault checks its declared options (elastic_chaos.options) when made."""
        validate(self)

    def unavailable(self, platform: Platform) -> str | None:
        """Why this fault cannot be injected on ``platform`` here, or None."""
        return platform.lacks(self.requires) if self.requires is not None else None

    def aim_at(self, event: Event) -> None:
        """An armed fault learns the event that fired it before it is planned (e.g. a
        kill aims at the node that started writing a checkpoint). Default: keep the aim."""
        return

    def stop_when(self, check: StopCheck) -> None:
        """Give a long-running fault (an AWS FIS experiment) a stop condition to poll.
        Default: the fault is over before a stop condition could matter."""
        return

    @abc.abstractmethod
    def plan(self, platform: Platform) -> FaultPlan:
        """Resolve targets and describe the actions; touches nothing."""

    @abc.abstractmethod
    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord: ...

    def inject(self, platform: Platform, timeline: Timeline, *, trigger: str | None = None) -> FaultRecord:
        """Perform the plan; record it on the timeline; return what was hit. ``trigger``
        names the event-trigger that fired it (an armed fault: a cascade is measured
        as part of the recovery it interrupted)."""
        plan = self.plan(platform)
        timeline.emit(FaultEv.PLANNED, plan.target, Planned(fault=self.name, actions=plan.actions))
        record = self._inject(platform, plan, timeline)
        if trigger is not None:
            record = replace(record, trigger=trigger)
        timeline.emit(FaultEv.INJECTED, record.target, record.event_payload(), t=record.injected_at)
        return record

    def revert(self, platform: Platform, timeline: Timeline, record: FaultRecord) -> None:
        """Undo the fault; idempotent. Records a ``fault/reverted`` event when there was
        something to undo."""
        hit = self._revert(platform, record)
        if hit is not None:
            timeline.emit(FaultEv.REVERTED, record.target, Reverted(fault=self.name, action=hit.action), t=hit.at)

    def _revert(self, platform: Platform, record: FaultRecord) -> Hit | None:
        return None  # most faults have nothing to undo


def pick_victim(platform: Platform, explicit: str | None = None, *, avoid_store_host: bool = True) -> str:
    """The node a fault aims at: ``explicit`` if given, else the newest live node
    (never a c10d store host unless asked for: that is the store-host-loss fault)."""
    if explicit:
        return explicit
    alive = [n.name for n in platform.alive_nodes()]
    host = platform.store_host() if avoid_store_host else None
    candidates = [n for n in alive if n != host] or alive
    if not candidates:
        raise InjectionFailed("no live node to aim at")
    return candidates[-1]
