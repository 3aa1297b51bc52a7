"""What a Kubernetes run needs to know about the cluster: job kind, image, resources, placement, storage.

Frozen dataclasses (KubeSettings is the cluster half of a run; JobSpec is the
job half) and two presets: ``kind_settings()`` for the kind/ cluster and
``eks_gpu_settings()`` for a spot GPU node group on EKS. Rendering them into
manifests is :mod:`k8s_manifests`'s job; both are pure (no client import).
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any

from elastic_chaos.errors import SpecError
from elastic_chaos.options import DAY_S, option, validate

Manifest = dict[str, Any]

ETCD_IMAGE = "quay.io/coreos/etcd:v3.5.17"
TRAINER_IMAGE = "elastic-chaos-trainer:dev"
CHECKPOINT_MOUNT = "/checkpoints"
SPOT_TAINT = "elastic-chaos/spot"
CAPACITY_LABEL = "eks.amazonaws.com/capacityType"

DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


class JobKind(str, enum.Enum):
    STATEFULSET = "statefulset"
    """Plain Kubernetes objects, no operator: a StatefulSet of torchrun pods (kept alive by
    kube-controller-manager) and the run's etcd. Runs on any cluster."""
    ELASTICJOB = "elasticjob"
    """The TorchElastic controller's ElasticJob (its CRD and controller must be installed)."""
    PYTORCHJOB = "pytorchjob"
    """The Kubeflow training operator's PyTorchJob with an elasticPolicy."""

    @property
    def api_version(self) -> str:
        return {"statefulset": "apps/v1", "elasticjob": "elastic.pytorch.org/v1alpha1",
                "pytorchjob": "kubeflow.org/v1"}[self.value]

    @property
    def kind(self) -> str:
        return {"statefulset": "StatefulSet", "elasticjob": "ElasticJob", "pytorchjob": "PyTorchJob"}[self.value]

    @property
    def plural(self) -> str:
        return self.value + "s"

    @property
    def container(self) -> str:
        """The worker container's name (the training operator requires ``pytorch``)."""
        return {"statefulset": "worker", "elasticjob": "elasticjob-worker", "pytorchjob": "pytorch"}[self.value]

    @property
    def needs_operator(self) -> bool:
        """A custom resource that only its own controller turns into pods."""
        return self is not JobKind.STATEFULSET


class StorageKind(str, enum.Enum):
    PVC = "pvc"              # a ReadWriteMany claim: EFS/FSx on EKS, NFS elsewhere
    HOST_PATH = "host-path"  # kind: one host folder mounted into every node container


@dataclass(frozen=True)
class CheckpointStorage:
    """The shared checkpoint volume every worker pod mounts at ``/checkpoints``."""

    kind: StorageKind = StorageKind.PVC
    """A PVC (created per run unless ``existing_claim``) or a host path."""
    storage_class: str | None = None
    """StorageClass of the created claim (``efs-sc``, ``fsx-sc``); None: the cluster default."""
    size: str = "5Gi"
    """Requested size of the created claim."""
    access_mode: str = "ReadWriteMany"
    """Workers on different nodes share it, so ReadWriteMany."""
    existing_claim: str | None = None
    """Mount this claim instead of creating one (the seeds' static EFS claim)."""
    host_path: str = "/shared/elastic-chaos"
    """HOST_PATH: folder on every node (kind/cluster.yaml mounts one host folder there)."""


@dataclass(frozen=True)
class Toleration:
    key: str
    value: str | None = None
    effect: str = "NoSchedule"
    operator: str = "Equal"

    def to_manifest(self) -> Manifest:
        out: Manifest = {"key": self.key, "operator": self.operator, "effect": self.effect}
        if self.value is not None and self.operator == "Equal":
            out["value"] = self.value
        return out


@dataclass(frozen=True)
class KubeSettings:
    """Where and how the job's pods run; the cluster half of a run (JobSpec is the job half)."""

    namespace: str = option("default", "namespace of everything the run creates (must exist)")
    job_kind: JobKind = option(JobKind.STATEFULSET, "statefulset (plain Kubernetes objects, no operator: "
                                                    "runs on any cluster), elasticjob (the TorchElastic "
                                                    "controller) or pytorchjob (the Kubeflow training operator)")
    image: str = option(TRAINER_IMAGE, "trainer image: torch and the trainer package (kind/Dockerfile builds "
                                       "one)", flag="--trainer-image")
    image_pull_policy: str = option("IfNotPresent", "IfNotPresent suits kind (images loaded with `kind load`); "
                                                    "Never for images imported into each node; Always for a "
                                                    "registry tag")
    etcd_image: str = ETCD_IMAGE
    """etcd 3.5 (3.6 dropped the v2 API torch's etcd-v2 rendezvous needs)."""
    etcd_shell: bool = False
    """The etcd image has ``/bin/sh``: etcd then runs under a small loop the etcd-outage fault
    stops and resumes through ``exec`` (quay.io/coreos/etcd 3.5 is distroless: it has none)."""
    dns: bool = True
    """The cluster resolves Service names (CoreDNS). Without DNS (the local cluster) the
    statefulset kind gives the workers the etcd pod's IP instead of its Service name."""
    cpu: str | None = "1"
    """CPU request and limit per worker pod (None: none)."""
    memory: str | None = "2Gi"
    """Memory request and limit per worker pod (None: none)."""
    gpus_per_node: int = option(0, "nvidia.com/gpu per worker pod; the job's nproc_per_node must equal it",
                                minimum=0, maximum=64)
    efa_per_node: int = option(0, "vpc.amazonaws.com/efa interfaces per worker pod (p4d/p5: 4/32)", minimum=0,
                               maximum=64)
    shm_size: str = "1Gi"
    """Size of the in-memory ``/dev/shm`` (data-loader workers share tensors through it)."""
    tolerations: tuple[Toleration, ...] = ()
    """Worker pod tolerations (a spot node group's taint)."""
    node_selector: tuple[tuple[str, str], ...] = ()
    """Worker pod node selector (e.g. capacity type SPOT)."""
    etcd_node_selector: tuple[tuple[str, str], ...] = ()
    """Where etcd runs: keep it off spot capacity, it is the rendezvous."""
    storage: CheckpointStorage = field(default_factory=CheckpointStorage)
    one_pod_per_node: bool = True
    """Required anti-affinity: a Kubernetes node fault takes exactly one worker."""
    etcd_node_port: int | None = None
    """Expose etcd as a NodePort (kind maps 32379 to the host) instead of ClusterIP."""
    c10d_port: int = 29400
    """Port of the c10d store on worker-0 (c10d rendezvous only)."""
    termination_grace_s: int = option(30, "pod grace period: SIGTERM -> SIGKILL on a graceful delete, "
                                          "eviction or drain", flag="--termination-grace", minimum=0, units="s",
                                      maximum=DAY_S)
    service_account: str | None = None
    """Service account of the worker pods (None: the namespace default)."""

    def __post_init__(self) -> None:
        if not DNS_LABEL.match(self.namespace):
            raise SpecError(f"namespace {self.namespace!r} is not a DNS label (lower case, digits, '-')")
        validate(self)


def kind_settings(**overrides: Any) -> KubeSettings:
    """The kind/ cluster: CPU trainer image loaded into the nodes, workers on the
    tainted spot workers, etcd on the on-demand worker, checkpoints in the host
    folder every node mounts, etcd reachable from the host on port 32379."""
    base: dict[str, Any] = {
        "tolerations": (Toleration(SPOT_TAINT, "true"),),
        "node_selector": ((CAPACITY_LABEL, "SPOT"),),
        "etcd_node_selector": ((CAPACITY_LABEL, "ON_DEMAND"),),
        "storage": CheckpointStorage(kind=StorageKind.HOST_PATH),
        "etcd_node_port": 32379,
        "cpu": "1", "memory": "1Gi",
    }
    base.update(overrides)
    return KubeSettings(**base)


def eks_gpu_settings(*, image: str, gpus_per_node: int, efa_per_node: int = 0,
                     storage_class: str = "efs-sc", spot: bool = True, **overrides: Any) -> KubeSettings:
    """An EKS GPU node group as in the seeds: nvidia.com/gpu per pod, optional EFA,
    workers on spot capacity (tolerating the node group's ``nvidia.com/gpu`` taint),
    etcd on on-demand capacity, checkpoints on an EFS (or FSx) claim."""
    capacity = "SPOT" if spot else "ON_DEMAND"
    base: dict[str, Any] = {
        "image": image, "image_pull_policy": "Always", "gpus_per_node": gpus_per_node,
        "efa_per_node": efa_per_node, "cpu": None, "memory": None, "shm_size": "16Gi",
        "tolerations": (Toleration("nvidia.com/gpu", operator="Exists"),),
        "node_selector": ((CAPACITY_LABEL, capacity),),
        "etcd_node_selector": ((CAPACITY_LABEL, "ON_DEMAND"),),
        "storage": CheckpointStorage(kind=StorageKind.PVC, storage_class=storage_class, size="100Gi"),
    }
    base.update(overrides)
    return KubeSettings(**base)
