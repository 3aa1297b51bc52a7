"""Watch a lost node's replacement arrive: instance, Kubernetes node, pod.

After an interruption the replacement goes through three hands, and the
game day times each: the Auto Scaling group launches an instance
(*provision*), the instance boots and its kubelet registers a Ready node
(*join*), the controller's new pod lands on it and joins the rendezvous
(*rendezvous*, from the rendezvous watcher's events). This watcher polls the
reads that show the first two (DescribeInstances of the targets,
DescribeAutoScalingGroups / DescribeScalingActivities of their groups, and,
on EKS, the Node list) and puts what changed on the timeline:

- ``node/instance_state`` (a targeted or new instance changed state),
- ``node/instance_launched`` (a new instance in a targeted group, timed at its
  EC2 LaunchTime), ``node/asg_activity`` (each new scaling activity),
- ``node/instance_joined`` (the node whose providerID is a new instance is Ready).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from elastic_chaos.events import NodeEv, Timeline
from elastic_chaos.events.node_events import AsgActivity, Instance
from elastic_chaos.platforms.aws.clients import AwsClients, describe_groups, describe_instances, scaling_activities
from elastic_chaos.platforms.aws.eks import machine_from_node
from elastic_chaos.platforms.kubernetes.watch import read_json
from elastic_chaos.waiting import eventually
from elastic_chaos.watchers.api import Watcher

log = logging.getLogger(__name__)


class ReplacementWatcher(Watcher):
    """Polls every ``interval_s``; reads only."""

    def __init__(self, timeline: Timeline, clients: AwsClients, *, instances: list[str], groups: list[str],
                 core_v1: Any = None, interval_s: float = 5.0, since: float | None = None) -> None:
        super().__init__(timeline)
        self.clients = clients
        self.interval_s = interval_s
        self.groups = sorted(set(groups))
        self.core = core_v1
        self.since = time.time() if since is None else since
        self._state: dict[str, str] = {}
        self._known_members: set[str] | None = None
        self._new: dict[str, str] = {}          # new instance -> its group
        self._joined: set[str] = set()
        self._activities: set[str] = set()
        self._watched = list(instances)
        self._first = True

    def poll(self) -> None:
        members = self._poll_groups()
        ids = sorted(set(self._watched) | set(self._new))
        for inst in describe_instances(self.clients.ec2, ids=ids):
            self._saw_state(inst.id, inst.state, inst.launch_time)
        if members is not None:
            self._poll_activities()
        if self.core is not None and self._new:
            self._poll_nodes()
        self._first = False

    def _poll_groups(self) -> set[str] | None:
        if not self.groups:
            return None
        members: dict[str, str] = {}
        for g in describe_groups(self.clients.autoscaling, self.groups):
            members.update({i: g.name for i in g.instances})
        if self._known_members is None:
            self._known_members = set(members)
            return set(members)
        for inst, group in members.items():
            if inst not in self._known_members and inst not in self._new:
                self._new[inst] = group
        self._known_members |= set(members)
        return set(members)

    def _saw_state(self, inst: str, state: str, launch_time: float | None) -> None:
        before = self._state.get(inst)
        if before == state:
            return
        self._state[inst] = state
        if inst in self._new and before is None:
            t = launch_time if launch_time and launch_time >= self.since - 1 else time.time()
            self.timeline.emit(NodeEv.INSTANCE_LAUNCHED, None, Instance(instance=inst, group=self._new[inst]), t=t)
        if before is not None or inst in self._new:
            self.timeline.emit(NodeEv.INSTANCE_STATE, None, Instance(instance=inst, state=state, previous=before,
                                                                     new=inst in self._new))

    def _poll_activities(self) -> None:
        for group in self.groups:
            for act in scaling_activities(self.clients.autoscaling, group):
                key = str(act.get("ActivityId"))
                if key in self._activities:
                    continue
                self._activities.add(key)
                start = act.get("StartTime")
                t = start.timestamp() if isinstance(start, datetime) else time.time()
                if t >= self.since - 1 and not self._first:
                    self.timeline.emit(NodeEv.ASG_ACTIVITY, None, AsgActivity(
                        group=group, status=_text(act.get("StatusCode")), description=_text(act.get("Description")),
                        cause=_text(act.get("Cause"))), t=t)

    def _poll_nodes(self) -> None:
        nodes = read_json(self.core.list_node(_preload_content=False)).get("items") or []
        for node in nodes:
            try:
                machine = machine_from_node(node)
            except Exception:   # noqa: BLE001 - a node that is not an EC2 instance is none of ours
                continue
            if machine.instance_id in self._new and machine.ready and machine.instance_id not in self._joined:
                self._joined.add(machine.instance_id)
                self.timeline.emit(NodeEv.INSTANCE_JOINED, machine.name, Instance(
                    instance=machine.instance_id, machine=machine.name, group=self._new[machine.instance_id]))

    def new_instances(self) -> list[str]:
        return sorted(self._new)

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Block until ``predicate()`` holds (True) or ``timeout_s`` passed (False)."""
        return eventually(predicate, timeout_s=timeout_s, interval_s=min(0.2, self.interval_s))


def _text(v: object) -> str | None:
    """An AWS field as text (None stays None)."""
    return None if v is None else str(v)
