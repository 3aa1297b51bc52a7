"""Faults after which a node is still there but silent: partition and freeze.

- ``partition``: a network black hole. The node's processes run on, but no
  packet reaches it or leaves it, and nobody answers for it: peers find out
  only by timeouts (collective timeouts, rendezvous keep-alive expiry), as
  after a real instance loss or NIC failure. ``revert()`` heals.
- ``freeze``: every process of the node stopped at once (a stuck host or
  GPU); sockets stay open, so peers again see only silence. ``revert()``
  thaws.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from elastic_chaos.events import Timeline
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.api import Fault, FaultPlan, pick_victim
from elastic_chaos.options import DAY_S, option
from elastic_chaos.platforms.api import Hit, Platform
from elastic_chaos.platforms.capabilities import Capability, Freezer, Partitioner


@dataclass
class Partition(Fault):
    node: str | None = None
    duration_s: float | None = option(None, "seconds until the partition heals (default: at the end of the run)",
                                      flag="--duration", above=0, units="s", maximum=DAY_S)
    name: ClassVar[str] = "partition"
    description: ClassVar[str] = "network black hole around one node: no packet in or out, no reset"
    requires: ClassVar[type[Capability] | None] = Partitioner

    def plan(self, platform: Platform) -> FaultPlan:
        target = pick_victim(platform, self.node)
        heal = f"heal after {self.duration_s:g}s" if self.duration_s is not None else "heal at teardown"
        return FaultPlan(self.name, target, (f"drop every frame to and from {target}", heal))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        assert plan.target is not None
        hit = platform.capability(Partitioner).cut(plan.target)
        return FaultRecord(self.name, plan.target, hit.at, hit, {"duration_s": self.duration_s})

    def _revert(self, platform: Platform, record: FaultRecord) -> Hit | None:
        assert record.target is not None
        return platform.capability(Partitioner).heal(record.target)


@dataclass
class Freeze(Fault):
    node: str | None = None
    duration_s: float | None = option(None, "seconds until the node thaws (default: at the end of the run)",
                                      flag="--duration", above=0, units="s", maximum=DAY_S)
    name: ClassVar[str] = "freeze"
    description: ClassVar[str] = "hung node: every process of one node stopped at once; sockets stay open"
    requires: ClassVar[type[Capability] | None] = Freezer

    def plan(self, platform: Platform) -> FaultPlan:
        target = pick_victim(platform, self.node)
        thaw = f"thaw after {self.duration_s:g}s" if self.duration_s is not None else "thaw at teardown"
        return FaultPlan(self.name, target, (f"freeze every process of {target}", thaw))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        assert plan.target is not None
        hit = platform.capability(Freezer).freeze(plan.target)
        return FaultRecord(self.name, plan.target, hit.at, hit, {"duration_s": self.duration_s})

    def _revert(self, platform: Platform, record: FaultRecord) -> Hit | None:
        assert record.target is not None
        return platform.capability(Freezer).thaw(record.target)
