"""The eks platform: the Kubernetes platform on EKS, where nodes are EC2 instances.

Everything the kubernetes platform does (start an ElasticJob/PyTorchJob, watch
its pods and nodes, pod and node faults) plus what only AWS can do: map each
Kubernetes node to its EC2 instance (``spec.providerID`` =
``aws:///<zone>/<instance id>``), its managed node group / Auto Scaling group,
and its capacity type (``eks.amazonaws.com/capacityType: SPOT``), so the AWS
faults (:mod:`elastic_chaos.faults.aws`: FIS spot interruption, terminate,
insufficient capacity) can aim at the instance under a worker pod.

A game day usually aims at a job that is already running: :meth:`attach`
watches an existing job's worker pods by label selector and creates nothing.
Every destructive call, AWS or Kubernetes, goes through the platform's
:class:`~elastic_chaos.platforms.aws.guard.Guard` (dry run, ``--gameday`` opt-in,
audit log, cleanup journal). boto3 is imported only by
:func:`elastic_chaos.platforms.aws.clients.make_clients`, and only for clients not injected.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic_chaos.errors import FaultUnavailable, InjectionFailed, PlatformError
from elastic_chaos.events import Timeline
from elastic_chaos.platforms.api import Hit
from elastic_chaos.platforms.aws.clients import describe_instances, instance_id_from_provider_id, make_clients
from elastic_chaos.platforms.aws.guard import Call, Guard, SafetyLimits, Undo
from elastic_chaos.platforms.aws.targets import AwsSide, Target
from elastic_chaos.platforms.capabilities import Capability, LinkDegrader
from elastic_chaos.platforms.kubernetes.actions import refused_loudly
from elastic_chaos.platforms.kubernetes.options import KubernetesOptions
from elastic_chaos.platforms.kubernetes.platform import KubernetesPlatform
from elastic_chaos.platforms.kubernetes.watch import ObjectWatch, read_json
from elastic_chaos.waiting import eventually

CAPACITY_LABELS = ("eks.amazonaws.com/capacityType", "karpenter.sh/capacity-type")
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"


@dataclass(frozen=True)
class EksOptions(KubernetesOptions):
    """KubernetesOptions plus the AWS side of a game day."""

    region: str | None = None
    """AWS region of the cluster (default: boto3's: AWS_REGION, the profile)."""
    endpoint_url: str | None = None
    """Send every AWS call here (a moto server in tests); default AWS (or AWS_ENDPOINT_URL)."""
    profile: str | None = None
    """AWS profile (default: boto3's credential chain)."""
    tags: tuple[tuple[str, str], ...] = ()
    """Only instances carrying every one of these tags are ever targets."""
    limits: SafetyLimits = field(default_factory=SafetyLimits)
    """Blast radius per fault: max nodes, max percent of the job's nodes."""
    fis_role_arn: str | None = None
    """The IAM role FIS assumes (FIS faults need it)."""
    stop_alarm: str | None = None
    """CloudWatch alarm name: ALARM stops the game day (and, as FIS's stop condition, its experiments)."""


@dataclass(frozen=True)
class Machine:
    """A Kubernetes node on EKS, as its Node object says."""

    name: str
    instance_id: str
    capacity_type: str | None
    node_group: str | None
    ready: bool
    unschedulable: bool


def machine_from_node(node: dict[str, Any]) -> Machine:
    """Read a Node object (raw JSON): instance from providerID, capacity type, node group."""
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    labels = meta.get("labels") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in (node.get("status") or {}).get("conditions") or [])
    capacity = next((str(labels[k]).upper().replace("-", "_") for k in CAPACITY_LABELS if k in labels), None)
    return Machine(name=str(meta.get("name")), instance_id=instance_id_from_provider_id(str(spec.get("providerID"))),
                   capacity_type=capacity, node_group=labels.get(NODEGROUP_LABEL), ready=ready,
                   unschedulable=bool(spec.get("unschedulable")))


FIS_LINKS = ("link faults on EKS are AWS FIS's aws:eks:pod-network-latency and aws:eks:pod-network-packet-loss "
             "(netem in the job's pods, injected by FIS), not made by this toolkit yet: missing are an experiment "
             "template aimed at the job's pods (target aws:eks:pod: the cluster, namespace and label selector), a "
             "Kubernetes service account FIS may act as (RBAC for ephemeral containers in the job's namespace), the "
             "two actions admitted by the game-day safety rules (elastic_chaos/platforms/aws/guard.py), and a probe "
             "between pods that measures what was applied; on the local cluster (make cluster-up) they are made")


class FisLinks(LinkDegrader):
    """Link faults on EKS: FIS's route, not made here; ``unavailable`` says what is missing."""

    def unavailable(self) -> str:
        return FIS_LINKS

    def _degrade(self, node: str, peers: tuple[str, ...], *, loss: float, rate_kbit: int | None,
                 down_s: float | None, up_s: float | None, delay_ms: float | None, jitter_ms: float,
                 to_store: bool) -> Hit:
        raise FaultUnavailable(FIS_LINKS)

    def _restore(self, node: str, link: str) -> Hit:
        return Hit(node=node, at=time.time(), action="nothing-to-restore")


class EksPlatform(KubernetesPlatform):
    Options = EksOptions
    name = "eks"

    def __init__(self, timeline: Timeline, work_dir: Path, options: EksOptions | None = None, *,
                 guard: Guard | None = None, aws_side: AwsSide | None = None, ec2: Any = None,
                 autoscaling: Any = None, fis: Any = None, cloudwatch: Any = None, sts: Any = None,
                 **k8s_clients: Any) -> None:
        self.eks_options = options or EksOptions()
        super().__init__(timeline, work_dir, self.eks_options, **k8s_clients)
        if aws_side is None:
            o = self.eks_options
            clients = make_clients(region=o.region, endpoint_url=o.endpoint_url, profile=o.profile, ec2=ec2,
                                   autoscaling=autoscaling, fis=fis, cloudwatch=cloudwatch, sts=sts)
            aws_side = AwsSide(clients, guard or Guard(dry_run=False, armed=False), run_id="eks",
                               limits=o.limits, tags=dict(o.tags), fis_role_arn=o.fis_role_arn,
                               stop_alarm=o.stop_alarm)
        self.aws_side = aws_side
        self.guard = aws_side.guard
        self._uncordon: dict[str, Undo | None] = {}
        self._selector: str | None = None

    def _offers(self) -> tuple[Capability, ...]:
        """The Kubernetes platform's, but a link between instances is FIS's to degrade (FisLinks)."""
        return tuple(c for c in super()._offers() if not isinstance(c, LinkDegrader)) + (FisLinks(self),)

    # -- an existing job --------------------------------------------------------------
    def attach(self, selector: str) -> None:
        """Watch the running job whose worker pods match ``selector`` (in the options'
        namespace); creates nothing. ``detach()`` (or ``close()``) stops the watches."""
        if self._selector is not None:
            raise PlatformError(f"already attached to pods {self._selector}")
        self._selector = selector
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        window = self.options.watch_window_s
        pods = ObjectWatch("pods", self.core.list_namespaced_pod, self.pods.on_event, window_s=window,
                           namespace=self.settings.namespace, label_selector=selector)
        self._watches.append(pods.start())
        self._watches.append(ObjectWatch("nodes", self.core.list_node, self.machines.on_event,
                                         window_s=window).start())
        self.machines.initial_done()
        eventually(self.pods.names, timeout_s=10.0, interval_s=0.1)   # the pods' first listing

    def detach(self) -> None:
        """Stop watching an attached job. Idempotent; the job itself is untouched."""
        self.pods.stopping = True
        errors = self._stop_threads()
        self._selector = None
        if errors:
            raise PlatformError("; ".join(errors))

    # -- nodes as instances ------------------------------------------------------------
    def machine(self, name: str) -> Machine:
        """The Kubernetes node ``name`` with its EC2 instance (a read)."""
        with refused_loudly(f"reading node {name}"):
            node = read_json(self.core.read_node(name, _preload_content=False))
        return machine_from_node(node)

    def instance_of(self, pod: str) -> str:
        """The EC2 instance under a worker pod."""
        return self.machine(self.machine_of(pod)).instance_id

    def aws_population(self) -> list[Target]:
        """The job's live worker pods' nodes as instances, in the order their pods started
        (oldest first); with tags, only instances carrying them."""
        by_machine: dict[str, list[str]] = {}
        for node in sorted(self.alive_nodes(), key=lambda n: n.started_at):
            machine = node.labels.get("machine")
            if machine:
                by_machine.setdefault(machine, []).append(node.name)
        machines = {name: self.machine(name) for name in by_machine}
        ids = [m.instance_id for m in machines.values()]
        instances = {i.id: i for i in describe_instances(self.aws_side.clients.ec2, ids=ids)}
        out = []
        for name, m in machines.items():
            inst = instances.get(m.instance_id)
            if inst is not None and inst.matches(self.aws_side.tags):
                out.append(Target(inst, machine=name, pods=tuple(by_machine[name])))
        return out

    # -- Kubernetes faults, through the guard --------------------------------------------
    def delete_pod_hit(self, pod: str, *, grace_s: int, uid: str | None) -> Hit:
        call = Call("kubernetes", "DeletePod", f"{self.settings.namespace}/{pod}",
                    {"gracePeriodSeconds": grace_s, "preconditions": {"uid": uid}})
        return self._guarded(call, lambda: super(EksPlatform, self).delete_pod_hit(pod, grace_s=grace_s, uid=uid),
                             pod, "delete-pod")

    def evict_pod(self, pod: str, *, grace_s: int | None = None) -> Hit:
        call = Call("kubernetes", "CreateEviction", f"{self.settings.namespace}/{pod}", {"gracePeriodSeconds": grace_s})
        return self._guarded(call, lambda: super(EksPlatform, self).evict_pod(pod, grace_s=grace_s), pod, "evict-pod")

    def cordon(self, machine: str, *, on: bool = True) -> Hit:
        call = Call("kubernetes", "PatchNode", machine, {"spec": {"unschedulable": on}})
        if on:
            self._uncordon.setdefault(machine, self.guard.remember("uncordon", machine))
        hit = self._guarded(call, lambda: super(EksPlatform, self).cordon(machine, on=on), machine,
                            "cordon" if on else "uncordon", cleanup=not on)
        if not on:
            self.guard.done(self._uncordon.pop(machine, None), "uncordoned")
        return hit

    def drain(self, machine: str, *, grace_s: int | None = None, timeout_s: float = 120.0) -> Hit:
        self._uncordon.setdefault(machine, self.guard.remember("uncordon", machine))
        call = Call("kubernetes", "Drain", machine, {"cordon": True, "evict": "every pod but DaemonSets' and "
                                                     "mirror pods", "gracePeriodSeconds": grace_s})
        return self._guarded(call, lambda: super(EksPlatform, self).drain(machine, grace_s=grace_s,
                                                                          timeout_s=timeout_s), machine, "drain")

    def delete_machine(self, machine: str) -> Hit:
        call = Call("kubernetes", "DeleteNode", machine)
        return self._guarded(call, lambda: super(EksPlatform, self).delete_machine(machine), machine, "delete-node")

    def _guarded(self, call: Call, fn: Any, node: str, action: str, *, cleanup: bool = False) -> Hit:
        hit = self.guard.mutate(call, fn, cleanup=cleanup)
        if hit is None:       # a dry run: nothing was hit
            return Hit(node=node, at=time.time(), action=f"dry-run:{action}")
        if not isinstance(hit, Hit):
            raise InjectionFailed(f"{call.describe()} returned {hit!r}, not a hit")
        return hit
