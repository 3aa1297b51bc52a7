"""The rendezvous store goes away for a while: ``etcd-outage``.

Two ways etcd goes away, which torch's agents take very differently:

- ``crash``: etcd is killed (a crashed pod, a Service with no endpoints):
  connections are refused at once. Restarted with its data after
  ``duration_s``.
- ``hang``: etcd is stopped (SIGSTOP: an overloaded or partitioned etcd):
  connections are accepted and never answered; clients wait out their
  timeouts. Resumed after ``duration_s``.

A training job touches etcd even in steady state: each agent's monitor loop
reads the rendezvous state every monitor interval to look for waiting
nodes. Arm the fault with the ``during_rendezvous`` trigger to hit a job
that is re-forming after a first failure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from elastic_chaos.events import Timeline
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.api import Fault, FaultPlan
from elastic_chaos.options import DAY_S, option
from elastic_chaos.platforms.api import Hit, Platform
from elastic_chaos.platforms.capabilities import Capability, StoreOutage, StoreStopper


@dataclass
class EtcdOutage(Fault):
    duration_s: float | None = option(10.0, "seconds until etcd comes back with its data", flag="--duration",
                                      above=0, units="s", maximum=DAY_S)
    how: StoreOutage = option(StoreOutage.CRASH, "crash: etcd is killed, connections are refused at once; "
                                                 "hang: it is stopped, connections are never answered",
                              flag="--store-outage")
    name: ClassVar[str] = "etcd-outage"
    description: ClassVar[str] = "the rendezvous store (etcd) is down for N seconds, then returns with its data"
    requires: ClassVar[type[Capability] | None] = StoreStopper

    def plan(self, platform: Platform) -> FaultPlan:
        back = f"restart it after {self.duration_s:g}s" if self.duration_s is not None else "restart at teardown"
        first = "SIGKILL etcd" if self.how is StoreOutage.CRASH else "SIGSTOP etcd"
        return FaultPlan(self.name, "etcd", (first, back))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        hit = platform.capability(StoreStopper).stop_store(how=self.how)
        return FaultRecord(self.name, "etcd", hit.at, hit, {"duration_s": self.duration_s, "how": self.how.value})

    def _revert(self, platform: Platform, record: FaultRecord) -> Hit | None:
        return platform.capability(StoreStopper).start_store()
