"""Faults that take nodes, workers or the store host away, and one that adds a node.

- ``kill-node``: the instance is gone without notice; every process of the
  node dies at once and the kernel closes its sockets (peers see resets).
- ``worker-crash``: one worker process dies (OOM, a segfault, a bad batch);
  its node and agent stay and restart the worker group.
- ``kill-during-checkpoint``: a kill aimed at the node writing a checkpoint,
  fired by the ``checkpoint started`` event (see :mod:`elastic_chaos.faults.triggers`).
- ``store-host-loss``: on the c10d backend the rendezvous store is a TCPStore
  inside one node (worker-0 on Kubernetes); losing that node loses the store.
- ``scale-up``: a node joins mid-run; the world grows without spending the
  restart budget.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from elastic_chaos.errors import InjectionFailed
from elastic_chaos.events import CheckpointEv, Event, Timeline, first
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.api import Fault, FaultPlan, pick_victim
from elastic_chaos.options import MAX_NODES, option
from elastic_chaos.platforms.api import Platform
from elastic_chaos.platforms.capabilities import Capability, NodeAdder, StoreHost, WorkerKiller


@dataclass
class KillNode(Fault):
    """Hard node loss: every process of the node SIGKILLed at once."""

    node: str | None = None
    name: ClassVar[str] = "kill-node"
    description: ClassVar[str] = "hard node loss: every process of one node killed at once (SIGKILL)"

    def plan(self, platform: Platform) -> FaultPlan:
        target = pick_victim(platform, self.node)
        return FaultPlan(self.name, target, platform.kill_plan(target))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        assert plan.target is not None
        hit = platform.kill_node(plan.target, graceful=False)
        return FaultRecord(self.name, plan.target, hit.at, hit)


@dataclass
class KillDuringCheckpoint(KillNode):
    """A hard kill of the node that is writing a checkpoint, while it writes."""

    name: ClassVar[str] = "kill-during-checkpoint"
    description: ClassVar[str] = ("hard kill of the node writing a checkpoint, fired by its "
                                  "'checkpoint started' event")

    def aim_at(self, event: Event) -> None:
        """Aim at the node that emitted the triggering event (the one writing)."""
        if event.node:
            self.node = event.node

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        record = super()._inject(platform, plan, timeline)
        started = timeline.select(CheckpointEv.STARTED, node=plan.target, until=record.injected_at)
        if not started:
            return record
        step = started[-1].data.step
        saved_first = first(timeline.events(), CheckpointEv.SAVED, node=plan.target, until=record.injected_at,
                            where=lambda e: e.data.step == step) is not None
        return FaultRecord(self.name, plan.target, record.injected_at, record.hit,
                           {"checkpoint_step": step, "during_write": not saved_first,
                            "checkpoint_path": started[-1].data.path})


@dataclass
class WorkerCrash(Fault):
    """One worker process of one node is killed; the node and its agent stay."""

    node: str | None = None
    local_rank: int = option(0, "which worker of the node dies (its LOCAL_RANK)", minimum=0, maximum=MAX_NODES - 1)
    name: ClassVar[str] = "worker-crash"
    description: ClassVar[str] = "one worker process of one node dies (SIGKILL); the node stays"
    requires: ClassVar[type[Capability] | None] = WorkerKiller

    def plan(self, platform: Platform) -> FaultPlan:
        target = pick_victim(platform, self.node)
        return FaultPlan(self.name, target, (f"SIGKILL the worker with LOCAL_RANK={self.local_rank} on {target}",))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        assert plan.target is not None
        hit = platform.capability(WorkerKiller).kill_worker(plan.target, local_rank=self.local_rank)
        return FaultRecord(self.name, plan.target, hit.at, hit, {"local_rank": self.local_rank})


@dataclass
class StoreHostLoss(Fault):
    """Hard loss of the node hosting the c10d rendezvous store."""

    name: ClassVar[str] = "store-host-loss"
    description: ClassVar[str] = ("hard loss of the node hosting the c10d rendezvous TCPStore "
                                  "(a single point of failure)")
    requires: ClassVar[type[Capability] | None] = StoreHost

    def plan(self, platform: Platform) -> FaultPlan:
        host = platform.store_host()
        if host is None:
            raise InjectionFailed("this job's rendezvous store is not hosted by a node (etcd-v2); "
                                  "store-host-loss needs --rdzv-backend c10d")
        return FaultPlan(self.name, host, (*platform.kill_plan(host), f"({host} hosts the c10d store)"))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        assert plan.target is not None
        hit = platform.kill_node(plan.target, graceful=False)
        return FaultRecord(self.name, plan.target, hit.at, hit, {"store_host": True})


@dataclass
class ScaleUp(Fault):
    """A new node joins the running job (capacity came back, or the autoscaler added one)."""

    name: ClassVar[str] = "scale-up"
    description: ClassVar[str] = "a node joins mid-run; the job re-forms a larger world"
    requires: ClassVar[type[Capability] | None] = NodeAdder

    def plan(self, platform: Platform) -> FaultPlan:
        job = platform.job
        if job is not None and len(platform.alive_nodes()) >= job.max_nodes:
            raise InjectionFailed(f"the job already runs {job.max_nodes} node(s), its maximum "
                                  f"(nodes {job.nodes}); start it with fewer (start_nodes) to scale up")
        return FaultPlan(self.name, None, ("start one more node of the job",))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        info = platform.capability(NodeAdder).add_node()
        return FaultRecord(self.name, info.name, info.started_at, None, {"added": info.name})
