"""Faults only a Kubernetes cluster has: pod deletion, eviction, cordon/drain, node loss.

Each is the real API call an operator, the cluster or a spot reclaim makes:

- ``delete-pod``: DELETE with gracePeriodSeconds=0 (the pod object goes at once,
  the kubelet kills its containers); ``delete-pod-graceful``: SIGTERM, then
  SIGKILL after the grace period, as ``kubectl delete pod`` does.
- ``evict-pod``: the Eviction API (policy/v1, policy/v1beta1 on servers older
  than 1.22), what the cluster-autoscaler and ``kubectl drain`` use; honours
  PodDisruptionBudgets.
- ``cordon-node`` (nothing running is touched; replacements must go elsewhere),
  ``drain-node`` (cordon + evict everything movable, what a node-termination
  handler does on a spot notice), ``delete-node`` (the Node object vanishes).
- ``stop-kind-node``: on kind, stop the node's container (the machine is gone;
  the kubelet stops reporting and the node turns NotReady).

The target is the newest live worker pod unless named (``pod=``), and for the
machine faults the Kubernetes node under it (``machine=`` to name one). A
pod deletion carries the planned pod's uid as a precondition: if it was
replaced between plan and inject, the server answers 409 and the injection
fails. Every refusal (403/404/409/429) is an InjectionFailed, never a success.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from elastic_chaos.errors import FaultUnavailable
from elastic_chaos.events import Timeline
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.api import Fault, FaultPlan, pick_victim
from elastic_chaos.platforms.api import Hit, Platform

if TYPE_CHECKING:
    from elastic_chaos.platforms.kubernetes.kind_cluster import KindPlatform
    from elastic_chaos.platforms.kubernetes.platform import KubernetesPlatform


KUBERNETES_PLATFORMS = ("kubernetes", "kind", "eks")


def _k8s(platform: Platform, kind: str) -> KubernetesPlatform:
    from elastic_chaos.platforms.kubernetes.platform import KubernetesPlatform
    if not isinstance(platform, KubernetesPlatform):
        raise FaultUnavailable(f"{kind} needs a Kubernetes platform (--platform kubernetes or kind); "
                               f"this run uses {platform.name}")
    return platform


def _kind(platform: Platform, kind: str) -> KindPlatform:
    from elastic_chaos.platforms.kubernetes.kind_cluster import KindPlatform
    if not isinstance(platform, KindPlatform):
        raise FaultUnavailable(f"{kind} stops a kind node's container: it needs --platform kind; "
                               f"this run uses {platform.name}")
    return platform


def _record(kind: str, target: str | None, hit: Hit, **detail: object) -> FaultRecord:
    return FaultRecord(kind, target, hit.at, hit, detail=dict(detail))


@dataclass
class DeletePod(Fault):
    """Delete one worker pod with grace 0: gone at once, no SIGTERM handler runs."""

    pod: str | None = None
    grace_s: int = 0
    name: ClassVar[str] = "delete-pod"
    platforms: ClassVar[tuple[str, ...]] = KUBERNETES_PLATFORMS
    description: ClassVar[str] = "delete a worker pod with grace period 0 (force delete)"
    _uid: str | None = field(default=None, init=False, repr=False)

    def plan(self, platform: Platform) -> FaultPlan:
        k8s = _k8s(platform, self.name)
        target = pick_victim(platform, self.pod)
        info = k8s.pods.get(target)
        self._uid = info.labels.get("uid") if info else None
        ns = k8s.settings.namespace
        return FaultPlan(self.name, target, (
            f"DELETE pod {ns}/{target} gracePeriodSeconds={self.grace_s} precondition uid={self._uid}",
            "wait until the pod is gone" + ("" if self.grace_s == 0 else f" (up to {self.grace_s}s + 30s)")))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        assert plan.target is not None
        hit = _k8s(platform, self.name).delete_pod(plan.target, grace_s=self.grace_s, uid=self._uid)
        return _record(self.name, plan.target, hit)


@dataclass
class DeletePodGraceful(DeletePod):
    """Delete one worker pod gracefully: SIGTERM, SIGKILL after ``grace_s``."""

    grace_s: int = 30
    name: ClassVar[str] = "delete-pod-graceful"
    description: ClassVar[str] = "delete a worker pod gracefully (SIGTERM, SIGKILL after the grace period)"


@dataclass
class EvictPod(Fault):
    """Evict one worker pod through the Eviction API (PDBs honoured)."""

    pod: str | None = None
    grace_s: int | None = None
    name: ClassVar[str] = "evict-pod"
    platforms: ClassVar[tuple[str, ...]] = KUBERNETES_PLATFORMS
    description: ClassVar[str] = "evict a worker pod (Eviction API, as the autoscaler and drain do)"

    def plan(self, platform: Platform) -> FaultPlan:
        k8s = _k8s(platform, self.name)
        target = pick_victim(platform, self.pod)
        grace = "the pod's grace period" if self.grace_s is None else f"grace {self.grace_s}s"
        return FaultPlan(self.name, target, (
            f"POST {k8s.actions.eviction_version()} Eviction for pod {k8s.settings.namespace}/{target} ({grace})",))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        assert plan.target is not None
        hit = _k8s(platform, self.name).evict_pod(plan.target, grace_s=self.grace_s)
        return _record(self.name, plan.target, hit)


@dataclass
class _MachineFault(Fault):
    """A fault aimed at the Kubernetes node under a worker pod (or a named one)."""

    platforms: ClassVar[tuple[str, ...]] = KUBERNETES_PLATFORMS

    pod: str | None = None
    machine: str | None = None
    _aim: tuple[str, str | None] | None = field(default=None, init=False, repr=False)

    def _resolve(self, platform: Platform) -> tuple[KubernetesPlatform, str, str | None]:
        """(platform, machine, the worker pod on it) -- resolved by plan(), reused by inject()."""
        k8s = _k8s(platform, self.name)
        if self.machine:
            pods = k8s.pods_on(self.machine)
            self._aim = (self.machine, pods[0] if pods else None)
        else:
            victim = pick_victim(platform, self.pod)
            self._aim = (k8s.machine_of(victim), victim)
        return k8s, *self._aim

    def _planned(self, platform: Platform) -> tuple[KubernetesPlatform, str, str | None]:
        if self._aim is None:
            return self._resolve(platform)
        return _k8s(platform, self.name), *self._aim

    def _revert(self, platform: Platform, record: FaultRecord) -> Hit | None:
        machine = record.detail.get("machine")
        if not isinstance(machine, str):
            return None
        return _k8s(platform, self.name).cordon(machine, on=False)


@dataclass
class CordonNode(_MachineFault):
    """Mark the node under a worker pod unschedulable; nothing running is touched."""

    name: ClassVar[str] = "cordon-node"
    description: ClassVar[str] = "cordon the Kubernetes node under a worker pod (reverted: uncordon)"

    def plan(self, platform: Platform) -> FaultPlan:
        _, machine, _ = self._resolve(platform)
        return FaultPlan(self.name, machine, (f"PATCH node {machine} spec.unschedulable=true",))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        assert plan.target is not None
        hit = _k8s(platform, self.name).cordon(plan.target)
        return _record(self.name, plan.target, hit, machine=plan.target)


@dataclass
class DrainNode(_MachineFault):
    """kubectl drain the node under a worker pod: cordon, evict, wait until moved."""

    grace_s: int | None = None
    timeout_s: float = 120.0
    name: ClassVar[str] = "drain-node"
    description: ClassVar[str] = "drain the Kubernetes node under a worker pod (cordon + evict; reverted: uncordon)"

    def plan(self, platform: Platform) -> FaultPlan:
        k8s, machine, victim = self._resolve(platform)
        return FaultPlan(self.name, victim or machine, (
            f"PATCH node {machine} spec.unschedulable=true",
            f"POST {k8s.actions.eviction_version()} Eviction for every pod on {machine} "
            "but DaemonSet and mirror pods", f"wait up to {self.timeout_s:.0f}s until they are gone"))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        k8s, machine, victim = self._planned(platform)
        hit = k8s.drain(machine, grace_s=self.grace_s, timeout_s=self.timeout_s)
        return _record(self.name, victim or machine, hit, machine=machine)


@dataclass
class DeleteNode(_MachineFault):
    """Delete the Node object under a worker pod: the cluster forgets the machine."""

    name: ClassVar[str] = "delete-node"
    description: ClassVar[str] = "delete the Kubernetes Node object under a worker pod"

    def plan(self, platform: Platform) -> FaultPlan:
        _, machine, victim = self._resolve(platform)
        return FaultPlan(self.name, victim or machine, (f"DELETE node {machine}",))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        k8s, machine, victim = self._planned(platform)
        hit = k8s.delete_machine(machine)
        return _record(self.name, victim or machine, hit, machine=machine)

    def _revert(self, platform: Platform, record: FaultRecord) -> Hit | None:
        return None    # a live kubelet re-registers its node by itself; nothing to undo


@dataclass
class StopKindNode(_MachineFault):
    """Stop the kind node container under a worker pod (``docker kill``; graceful: ``docker stop``)."""

    graceful: bool = False
    name: ClassVar[str] = "stop-kind-node"
    platforms: ClassVar[tuple[str, ...]] = ("kind",)
    description: ClassVar[str] = "stop the kind node container under a worker pod (reverted: docker start)"

    def plan(self, platform: Platform) -> FaultPlan:
        kind_platform = _kind(platform, self.name)
        _, machine, victim = self._resolve(platform)
        return FaultPlan(self.name, victim or machine, (" ".join(kind_platform.container_command(
            "stop" if self.graceful else "kill", machine)),))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        kind_platform = _kind(platform, self.name)
        _, machine, victim = self._planned(platform)
        hit = kind_platform.stop_machine(machine, graceful=self.graceful)
        return _record(self.name, victim or machine, hit, machine=machine)

    def _revert(self, platform: Platform, record: FaultRecord) -> Hit | None:
        machine = record.detail.get("machine")
        if not isinstance(machine, str):
            return None
        return _kind(platform, self.name).start_machine(machine)
