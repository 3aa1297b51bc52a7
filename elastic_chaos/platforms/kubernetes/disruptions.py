"""What the Kubernetes API itself can do to a job's pods and machines: delete, evict, cordon, drain.

The pod-level half of the Kubernetes platform (the faults of
elastic_chaos.faults.kubernetes call these): each is the API call an operator, the
cluster or a node-termination handler makes, each records the pods it takes
as ``node/lost`` (the pod watch then knows the loss was ours), and each
refusal (403/404/409/429) is an InjectionFailed (elastic_chaos.platforms.kubernetes.actions).
"""
from __future__ import annotations

import time

from elastic_chaos.errors import InjectionFailed
from elastic_chaos.events import NodeEv
from elastic_chaos.events.node_events import Lost
from elastic_chaos.platforms.api import Hit, NodeInfo, Platform
from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.platforms.kubernetes.actions import ClusterActions
from elastic_chaos.platforms.kubernetes.pods import PodTracker


class PodDisruptions(Platform):
    """Pod and Node API faults over the run's pod view (``pods``) and API calls (``actions``)."""

    pods: PodTracker
    actions: ClusterActions
    settings: m.KubeSettings

    def delete_pod(self, pod: str, *, grace_s: int = 0, uid: str | None = None) -> Hit:
        """Delete a worker pod (grace 0: at once; else SIGTERM, SIGKILL after ``grace_s``).
        With ``uid``, only that incarnation. Blocks until it is gone (graceful: up to
        ``grace_s`` + 30 s). Raises InjectionFailed on 403/404/409."""
        self._require_node(pod)
        hit = self.delete_pod_hit(pod, grace_s=grace_s, uid=uid)
        self.timeline.emit(NodeEv.LOST, pod, Lost.read({**hit.detail, "action": hit.action}), t=hit.at)
        return hit

    def delete_pod_hit(self, pod: str, *, grace_s: int, uid: str | None) -> Hit:
        info = self.pods.get(pod)
        uid = uid or (info.labels.get("uid") if info else None)
        self.pods.expect_loss(pod)
        at = time.time()
        self.actions.delete_pod(pod, grace_s=grace_s, uid=uid)
        gone = self.actions.wait_pod_gone(pod, uid, grace_s + 30.0)
        action = "delete-pod-grace-0" if grace_s == 0 else "delete-pod-graceful"
        return Hit(node=pod, at=at, action=action,
                   detail={"uid": uid, "grace_s": grace_s, "machine": _machine(info), "gone": gone})

    def evict_pod(self, pod: str, *, grace_s: int | None = None) -> Hit:
        """Evict a worker pod through the Eviction API (PDBs honoured). Returns once
        the eviction is accepted; the pod then terminates gracefully."""
        info = self._require_node(pod)
        self.pods.expect_loss(pod)
        at = time.time()
        version = self.actions.evict_pod(pod, grace_s=grace_s)
        hit = Hit(node=pod, at=at, action="evict-pod",
                  detail={"policy_version": version, "uid": info.labels.get("uid"), "machine": _machine(info)})
        self.timeline.emit(NodeEv.LOST, pod, Lost.read({**hit.detail, "action": hit.action}), t=at)
        return hit

    def cordon(self, machine: str, *, on: bool = True) -> Hit:
        """Mark a Kubernetes node (un)schedulable; running pods stay. Idempotent."""
        at = time.time()
        self.actions.set_unschedulable(machine, on)
        return Hit(node=machine, at=at, action="cordon" if on else "uncordon")

    def drain(self, machine: str, *, grace_s: int | None = None, timeout_s: float = 120.0) -> Hit:
        """kubectl drain: cordon, evict every pod but DaemonSets' and mirror pods, wait
        until they are gone. The job's pods among them become ``node lost`` events."""
        at = time.time()
        for pod in self.pods_on(machine):
            self.pods.expect_loss(pod)
        evicted = self.actions.drain(machine, grace_s=grace_s, timeout_s=timeout_s,
                                     on_evicted=lambda p: self._evicted(p, at))
        return Hit(node=machine, at=at, action="drain", detail={"evicted": evicted})

    def _evicted(self, pod: m.Manifest, at: float) -> None:
        name = pod["metadata"]["name"]
        if self.pods.get(name) is not None:
            self.timeline.emit(NodeEv.LOST, name, Lost(
                action="drain", machine=(pod.get("spec") or {}).get("nodeName")), t=at)

    def delete_machine(self, machine: str) -> Hit:
        """Delete the Node object (the machine vanishes from the cluster's view; its pods
        are garbage-collected by the cluster; a kubelet that is still alive re-registers)."""
        at = time.time()
        pods = self.pods_on(machine)
        self.actions.delete_node(machine)
        for pod in pods:
            self.timeline.emit(NodeEv.LOST, pod, Lost(action="delete-node", machine=machine), t=at)
        return Hit(node=machine, at=at, action="delete-node", detail={"pods": pods})

    def pods_on(self, machine: str) -> list[str]:
        """The job's live worker pods on Kubernetes node ``machine``."""
        return [n.name for n in self.alive_nodes() if n.labels.get("machine") == machine]

    def machine_of(self, pod: str) -> str:
        """The Kubernetes node a worker pod runs on; InjectionFailed if it is not bound."""
        info = self._require_node(pod)
        machine = info.labels.get("machine")
        if not machine:
            raise InjectionFailed(f"pod {pod} is not scheduled on any node yet; nothing to aim at")
        return machine


def _machine(info: NodeInfo | None) -> str | None:
    return info.labels.get("machine") if info else None
