"""The eks platform: the Kubernetes platform on EKS, where nodes are EC2 instances.

Everything the kubernetes platform does (start an ElasticJob/PyTorchJob, watch
its pods and nodes, pod and node faults) plus what only AWS can do: map each
Kubernetes node to its EC2 instance (``spec.providerID`` =
``aws:///<zone>/<instance id>``), its managed node group / Auto Scaling group,
and its capacity type (``eks.amazonaws.com/capacityType: SPOT``), so the AWS
faults (:mod:`elastic_chaos.faults.aws`: FIS spot interruption, terminate,
insufficient capacity) can aim at the instance under a worker pod. Link faults
(``latency``, ``packet-loss``) are AWS FIS pod actions on the job's pods
(:mod:`elastic_chaos.platforms.aws.links`), asked of FIS and not measured here.

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
from elastic_chaos.platforms.aws.actions import FisPods
from elastic_chaos.platforms.aws.clients import describe_instances, instance_id_from_provider_id, make_clients
from elastic_chaos.platforms.aws.guard import Call, Guard, PodScope, SafetyLimits, Undo
from elastic_chaos.platforms.aws.links import FisLinks
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
    cluster: str | None = None
    """The EKS cluster's name or ARN: FIS's pod actions (link faults) aim at pods in it."""
    fis_service_account: str | None = None
    """The Kubernetes service account in the job's namespace FIS acts as for its pod actions
    (link faults; docs/EKS.md, 'Link faults', has its Role)."""
    fis_link_duration_s: float = 3600.0
    """The FIS pod action's own duration: the longest a link fault holds on EKS (its revert stops
    it sooner; FIS ends it then even if this process died)."""


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


UNIQUE_POD_LABELS = ("statefulset.kubernetes.io/pod-name", "training.kubeflow.org/replica-index",
                     "apps.kubernetes.io/pod-index", "batch.kubernetes.io/job-completion-index")
"""Labels that tell one worker pod of a job from the others (FIS selects pods by label only)."""


def single_pod_selector(job_selector: str, labels: dict[str, str]) -> str | None:
    """The job's selector plus the first of the pod's labels that names it alone among the
    job's pods (UNIQUE_POD_LABELS); None when it has none of them."""
    key = next((k for k in UNIQUE_POD_LABELS if labels.get(k)), None)
    return None if key is None else f"{job_selector},{key}={labels[key]}"


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
        """The Kubernetes platform's, but a pod's link is FIS's to degrade (FisLinks)."""
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

    # -- the job's pods as FIS targets (link faults: elastic_chaos.platforms.aws.links) -----
    def job_selector(self) -> str:
        """The label selector of the job's worker pods: the attached job's, else this run's."""
        if self._selector is not None:
            return self._selector
        if self.job is not None:
            from elastic_chaos.platforms.kubernetes.manifests import run_selector
            return run_selector(self.job.run_id, "worker")
        raise PlatformError("no job: attach to one (--job/--selector) or start one")

    def fis_pods(self, node: str) -> tuple[FisPods, PodScope]:
        """The FIS pod target naming the worker pod ``node`` alone (the job's selector plus a
        label only it carries, checked by listing the pods it selects), and the job's pods.
        FaultUnavailable when no label singles it out. Reads only."""
        ns, job = self.settings.namespace, self.job_selector()
        with refused_loudly(f"reading pod {ns}/{node}"):
            labels = (read_json(self.core.read_namespaced_pod(node, ns, _preload_content=False))
                      .get("metadata") or {}).get("labels") or {}
        selector = single_pod_selector(job, labels)
        if selector is not None:
            with refused_loudly(f"listing pods {selector}"):
                items = read_json(self.core.list_namespaced_pod(ns, label_selector=selector,
                                                                _preload_content=False)).get("items") or []
            if [(i.get("metadata") or {}).get("name") for i in items] != [node]:
                selector = None
        if selector is None:
            raise FaultUnavailable(f"FIS selects pods by label, and no label of pod {node} names it alone among the "
                                   f"job's pods ({job}); one of {', '.join(UNIQUE_POD_LABELS)} does (a StatefulSet's "
                                   "and a PyTorchJob's pods carry one)")
        return FisPods(str(self.eks_options.cluster), ns, selector), PodScope(ns, job)

    def pod_address(self, pod: str) -> str | None:
        """The pod's IP as its status last said (None: unknown, or not a live pod of the job)."""
        return next((n.labels.get("address") for n in self.alive_nodes() if n.name == pod), None)

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
