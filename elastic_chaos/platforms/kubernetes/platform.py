"""The Kubernetes platform: the job as a StatefulSet, an ElasticJob or a PyTorchJob on a real cluster.

A *node* of the job is a worker pod (one torchrun agent per pod, as the
controllers run it); the machines under them are Kubernetes nodes. The job,
its etcd and its checkpoint claim come from :mod:`k8s_manifests`; two watches
(:mod:`k8s_watch`) keep the platform's view of pods and machines current and
turn changes into ``node`` events; each worker pod's log is followed into
``nodes/<pod>.log`` (:mod:`k8s_logs`), which the LogFollower reads as it reads
the local platform's files. Pod faults go through :mod:`k8s_actions`; faults
on machines, inside pods and the node pool through :mod:`k8s_node_faults`.

What a cluster says about itself (its ``kube-public/elastic-chaos-cluster``
ConfigMap, :mod:`k8s_profile`: the local cluster of ``make cluster-up``
writes one) fills in the defaults and names who operates its machines.
Clients are built from a kubeconfig in :mod:`k8s_clients` only; tests pass
clients pointed at a real API server instead.
"""
from __future__ import annotations

import datetime
import logging
import os
import threading
from pathlib import Path, PurePosixPath
from typing import Any

from elastic_chaos.errors import ChaosError, PlatformError, SetupError
from elastic_chaos.events import NodeEv, RunnerEv, Timeline
from elastic_chaos.events.node_events import Provisioning
from elastic_chaos.events.runner_events import ManifestsApplied
from elastic_chaos.host import etcd_v2
from elastic_chaos.platforms.api import CheckpointFolder, Hit, NodeInfo, NodePool, NodeState
from elastic_chaos.platforms.capabilities import Capability
from elastic_chaos.platforms.kubernetes import jobs, node_faults
from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.platforms.kubernetes.actions import ClusterActions, create_error, delete_object
from elastic_chaos.platforms.kubernetes.capabilities import kubernetes_capabilities
from elastic_chaos.platforms.kubernetes.clients import make_clients
from elastic_chaos.platforms.kubernetes.disruptions import PodDisruptions
from elastic_chaos.platforms.kubernetes.logs import Instance, PodLogFollower
from elastic_chaos.platforms.kubernetes.machines import LocalClusterMachines, Machines, NoMachines
from elastic_chaos.platforms.kubernetes.notices import NoticeServer
from elastic_chaos.platforms.kubernetes.options import KubernetesOptions
from elastic_chaos.platforms.kubernetes.orphans import RUNNER_ANNOTATION, runner_stamp
from elastic_chaos.platforms.kubernetes.pods import MachineTracker, PodTracker
from elastic_chaos.platforms.kubernetes.pool import MachinePool
from elastic_chaos.platforms.kubernetes.portforward import PortForward
from elastic_chaos.platforms.kubernetes.profile import ClusterProfile, read_profile
from elastic_chaos.platforms.kubernetes.scale import JobScaler
from elastic_chaos.platforms.kubernetes.watch import ObjectWatch, api_message, api_status, read_json
from elastic_chaos.platforms.storage import StorageLayer
from elastic_chaos.spec import JobSpec
from elastic_chaos.waiting import eventually

log = logging.getLogger(__name__)

STORAGE_SETTLE_S = 20.0
"""Before the storage layer goes: how long to wait for the pods' processes that used it to be gone (they
outlive their API objects for a moment; a file they open after the daemon went fails with ENOTCONN)."""


class KubernetesPlatform(PodDisruptions):
    name = "kubernetes"
    Options = KubernetesOptions

    @classmethod
    def option_classes(cls) -> tuple[type, ...]:
        return (cls.Options, m.KubeSettings)

    @classmethod
    def make_options(cls, values: dict[str, Any]) -> Any:
        from elastic_chaos.platforms.kubernetes.options import make_options
        return make_options(cls.Options, dict(values), kind=cls.name == "kind")

    def node_pool(self) -> NodePool:
        return self.options

    def __init__(self, timeline: Timeline, work_dir: Path, options: KubernetesOptions | None = None, *,
                 api_client: Any = None, core_v1: Any = None, apps_v1: Any = None,
                 custom_objects: Any = None, policy_v1: Any = None, machine_ops: Machines | None = None) -> None:
        super().__init__(timeline, work_dir)
        self.options = options or KubernetesOptions()
        self.core, self.apps, self.custom, self.policy = make_clients(
            self.options, api_client, core_v1, apps_v1, custom_objects, policy_v1)
        self.profile: ClusterProfile | None = read_profile(self.core) if self.options.cluster_profile else None
        self.settings = self.profile.settings(self.options.settings) if self.profile else self.options.settings
        self.machine_ops: Machines = machine_ops or self._machine_ops()
        """Who operates the machines under the pods (the node faults, the node pool)."""
        self.actions = ClusterActions(self.core, self.settings.namespace, policy_v1=self.policy)
        self.pods = PodTracker(timeline)
        self.machines = MachineTracker(timeline)
        self.pool: MachinePool | None = None
        self.notices: NoticeServer | None = None
        self.etcd_pod: m.Manifest | None = None
        """The etcd pod as last read (its name and IP), for the statefulset kind."""
        self.node_faults = node_faults.NodeFaults(self)
        self._watches: list[ObjectWatch] = []
        self._followers: dict[str, PodLogFollower] = {}
        self._lock = threading.Lock()
        self._port_forward: PortForward | None = None
        self._created: list[m.Manifest] = []
        self._stamp = runner_stamp()
        self._scaler: JobScaler | None = None
        self.storage_layer: StorageLayer | None = None
        """The run's checkpoint folder behind the storage layer (the job asked: JobSpec.storage_layer)."""

    def _machine_ops(self) -> Machines:
        if self.profile is not None and self.profile.machines == "local-cluster" and self.profile.root:
            return LocalClusterMachines(self.profile.root)
        return NoMachines()

    @classmethod
    def node_log_timezone(cls) -> datetime.tzinfo:
        """Pods log in UTC (the job's pods get TZ=UTC; images default to it)."""
        return datetime.timezone.utc

    # -- paths ----------------------------------------------------------------------
    @property
    def logs_dir(self) -> Path:
        return self.work_dir / "nodes"

    # -- lifecycle -------------------------------------------------------------------
    def _start(self, job: JobSpec) -> None:
        kind = self.settings.job_kind
        base = m.render_base(job, self.settings)
        self._scaler = JobScaler(self.custom, self.settings, job.run_id, m.initial_replicas(job), apps=self.apps)
        final = None
        if kind is m.JobKind.STATEFULSET:
            from elastic_chaos.platforms.kubernetes.statefulset import final_exit
            final = final_exit
        self.pods, self.machines = PodTracker(self.timeline, final_exit=final), MachineTracker(self.timeline)
        self._created, self.etcd_pod = [], None
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        if job.storage_layer:   # before any pod: a pod binds the host folder, and what is mounted on it, as it starts
            self.storage_layer = StorageLayer.for_job(job, self._storage_folder(job), self.work_dir / "storage")
        self.pods.on_new_pod = self._follow_logs
        self._watch(job)
        self.pool = MachinePool(self.machine_ops, self.timeline, replace=self.options.replace_lost_nodes,
                                delay_s=self.options.provisioning_delay_s)
        self.node_faults.ensure_capacity(m.initial_replicas(job))
        for doc in base:
            self._create(doc)
        etcd_address = None
        reach_by_ip = not self.settings.dns or (self.profile is not None and self.profile.pods_reachable)
        if job.rdzv.backend.needs_etcd() and kind is m.JobKind.STATEFULSET and reach_by_ip:
            self.etcd_pod = self._wait_etcd_pod(job)   # its IP: the workers' (no DNS) or ours (pods reachable)
            etcd_address = None if self.settings.dns else self.etcd_pod["status"]["podIP"]
        docs = jobs.job_manifests(job, self.settings, etcd_address=etcd_address, env=self._pod_env())
        for doc in docs:
            self._create(doc)
        self.timeline.emit(RunnerEv.MANIFESTS_APPLIED, None, ManifestsApplied(
            kinds=tuple(str(d["kind"]) for d in base + docs), namespace=self.settings.namespace, job_kind=kind.value))
        self._wait_running(job)
        if job.rdzv.backend.needs_etcd():
            self._wait_etcd()

    def _pod_env(self) -> dict[str, str]:
        """Environment every worker gets from the platform: where the spot-notice stand-in is."""
        self.notices = self.node_faults.start_notices()
        return {"AWS_EC2_METADATA_SERVICE_ENDPOINT": self.notices.endpoint} if self.notices else {}

    def _wait_etcd_pod(self, job: JobSpec) -> m.Manifest:
        """Block until the run's etcd pod runs with an IP (the statefulset kind's workers are
        given it where there is no DNS); PlatformError with its state on timeout."""
        last: m.Manifest = {}

        def running() -> m.Manifest | None:
            nonlocal last
            pods = read_json(self.core.list_namespaced_pod(
                self.settings.namespace, label_selector=m.run_selector(job.run_id, "etcd"),
                _preload_content=False)).get("items") or []
            for pod in (p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")):
                last = pod
                status = pod.get("status") or {}
                if status.get("phase") == "Running" and status.get("podIP"):
                    return dict(pod)
            return None

        found = eventually(running, timeout_s=self.options.start_timeout_s, interval_s=0.3)
        if found is not None:
            return found
        raise PlatformError(f"the etcd pod of {job.run_id} did not run within {self.options.start_timeout_s:.0f}s "
                            f"(last seen: {(last.get('status') or {}).get('phase', 'none')}); is there on-demand "
                            f"capacity for it (etcd_node_selector {dict(self.settings.etcd_node_selector)})?")

    def _watch(self, job: JobSpec) -> None:
        window = self.options.watch_window_s
        pods = ObjectWatch("pods", self.core.list_namespaced_pod, self.pods.on_event, window_s=window,
                           namespace=self.settings.namespace,
                           label_selector=m.run_selector(job.run_id, "worker"))
        self._watches.append(pods.start())
        nodes = ObjectWatch("nodes", self.core.list_node, self.machines.on_event, window_s=window)
        self._watches.append(nodes.start())
        self.machines.initial_done()

    def _create(self, doc: m.Manifest) -> None:
        ns, kind = self.settings.namespace, doc["kind"]
        # who made it: what `elastic-chaos reap --kubeconfig` goes by if this runner is killed
        doc.setdefault("metadata", {}).setdefault("annotations", {})[RUNNER_ANNOTATION] = self._stamp
        try:
            if kind == "PersistentVolumeClaim":
                self.core.create_namespaced_persistent_volume_claim(ns, doc, _preload_content=False)
            elif kind == "Service":
                self.core.create_namespaced_service(ns, doc, _preload_content=False)
            elif kind == "Deployment":
                self.apps.create_namespaced_deployment(ns, doc, _preload_content=False)
            elif kind == "StatefulSet":
                self.apps.create_namespaced_stateful_set(ns, doc, _preload_content=False)
            else:
                jk = self.settings.job_kind
                group, version = jk.api_version.split("/")
                self.custom.create_namespaced_custom_object(group, version, ns, jk.plural, doc,
                                                            _preload_content=False)
        except Exception as exc:
            raise PlatformError(create_error(doc, exc, self.settings)) from exc
        self._created.append(doc)

    def _wait_running(self, job: JobSpec) -> None:
        want = m.initial_replicas(job)

        def running() -> bool:
            if len([n for n in self.pods.nodes() if n.state is NodeState.RUNNING]) >= want:
                return True
            self._raise_if_watch_died()
            return False

        if not eventually(running, timeout_s=self.options.start_timeout_s, interval_s=0.2):
            raise PlatformError(f"{want} worker pod(s) of {job.run_id} were not running after "
                                f"{self.options.start_timeout_s:.0f}s: "
                                f"{self.pods.describe() or 'no pods were created'}. "
                                "Is the controller installed and running (make kind-up), the image loadable "
                                "(kind load docker-image), and is there capacity for the pods?")

    def _wait_etcd(self) -> None:
        endpoint = self.etcd_endpoint()
        assert endpoint is not None  # called only for a backend that needs etcd
        if not eventually(lambda: etcd_v2.serves_v2(endpoint, timeout_s=2.0),
                          timeout_s=self.options.start_timeout_s, interval_s=0.3):
            raise PlatformError(f"the job's etcd does not answer at {endpoint} (v2 API); is the etcd pod "
                                "running, and is that address reachable from here (etcd_endpoint option)?")

    def _stop(self) -> None:
        assert self.job is not None
        errors: list[str] = []
        self.pods.stopping = True
        errors.extend(self.node_faults.release_all())   # no machine left frozen half the time
        if self._scaler is not None:
            self._scaler.cancel()
        if self.pool is not None:
            self.pool.stop()
        if self.notices is not None:
            self.notices.close()
            self.notices = None
        for doc in reversed(self._created):
            try:
                self._delete(doc)
            except Exception as exc:
                if api_status(exc) != 404:
                    errors.append(f"deleting {doc['kind']} {doc['metadata']['name']}: {api_message(exc)}")
        try:  # for clusters without a garbage collector, and faster everywhere: at once (grace 0), as
            # what the pods do from here on is the toolkit's teardown, not the job's behaviour; a
            # graceful end would wait out agents that talk to an etcd being deleted beside them
            self.core.delete_collection_namespaced_pod(self.settings.namespace,
                                                       label_selector=m.run_selector(self.job.run_id),
                                                       grace_period_seconds=0, _preload_content=False)
        except Exception as exc:
            if api_status(exc) == 403:   # the garbage collector removes them with the job
                log.info("may not delete the run's pods directly: %s", api_message(exc))
            elif api_status(exc) != 404:
                errors.append(f"deleting the run's pods: {api_message(exc)}")
        self.pods.wait_all_gone(self.options.stop_timeout_s)
        if self.storage_layer is not None:   # the pods are gone: nothing writes through it any more
            try:
                self.storage_layer.unmount(settle_within_s=STORAGE_SETTLE_S)
            except ChaosError as exc:
                errors.append(f"unmounting the storage layer: {exc}")
        errors += self._stop_threads()
        if errors:
            raise PlatformError("; ".join(errors))

    def _stop_threads(self) -> list[str]:
        errors: list[str] = []
        for follower in list(self._followers.values()) + list(self._watches):
            try:
                follower.stop()
            except PlatformError as exc:
                errors.append(str(exc))
        self._followers.clear()
        self._watches.clear()
        if self._port_forward is not None:
            self._port_forward.stop()
            self._port_forward = None
        return errors

    def _delete(self, doc: m.Manifest) -> None:
        delete_object(self.core, self.apps, self.custom, self.settings.namespace, doc["kind"], doc["metadata"]["name"])

    def _raise_if_watch_died(self) -> None:
        for w in self._watches:
            if w.error is not None:
                w.stop()

    # -- what the job looks like ------------------------------------------------------
    def nodes(self) -> list[NodeInfo]:
        return self.pods.nodes()

    def node_logs(self) -> dict[str, Path]:
        return {name: self.logs_dir / f"{name}.log" for name in self.pods.names()}

    def replacement_pending(self) -> bool:
        held = self._scaler is not None and self._scaler.pending()
        provisioning = self.pool is not None and self.pool.pending()
        return held or provisioning or self.pods.replacement_pending()

    def store_host(self) -> str | None:
        if self.job is None or self.job.rdzv.backend.needs_etcd():
            return None
        return m.worker_pod_name(self.job.run_id, 0)

    def etcd_endpoint(self) -> str | None:
        """Where this process reaches the job's etcd: the etcd_endpoint option; the etcd pod's IP
        where the pod network is reachable from here (the local cluster) or we run in a pod of a
        cluster without DNS; the Service name in a pod of a cluster with DNS; else a
        ``kubectl port-forward``."""
        if self.job is None or not self.job.rdzv.backend.needs_etcd():
            return None
        if self.options.etcd_endpoint:
            return self.options.etcd_endpoint
        service = m.etcd_name(self.job.run_id)
        pod_ip = (self.etcd_pod or {}).get("status", {}).get("podIP")
        in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
        if pod_ip and ((self.profile is not None and self.profile.pods_reachable) or in_cluster):
            return f"{pod_ip}:{m.ETCD_PORT}"
        if in_cluster:
            return f"{service}.{self.settings.namespace}.svc:{m.ETCD_PORT}"
        if self._port_forward is None:
            target = f"svc/{service}" if any(d["kind"] == "Service" and d["metadata"]["name"] == service
                                             for d in self._created) else f"deploy/{service}"
            self._port_forward = PortForward(self.options.kubectl, self.settings.namespace, target,
                                             m.ETCD_PORT, kubeconfig=self.options.kubeconfig,
                                             context=self.options.context, log_path=self.work_dir / "port-forward.log")
            self._port_forward.start()
        return self._port_forward.endpoint

    def job_workdir(self) -> Path | None:
        """The pods' working directory as seen here: on a host-path checkpoint volume this
        machine shares (the local cluster's), else None."""
        if self.job is None or self.profile is None or not self.profile.shared_dir:
            return None
        storage = self.settings.storage
        pod_dir = m.workdir(self.job)
        if storage.kind is not m.StorageKind.HOST_PATH or storage.host_path != self.profile.shared_dir \
                or not pod_dir.startswith(m.CHECKPOINT_MOUNT + "/"):
            return None
        return Path(storage.host_path) / pod_dir[len(m.CHECKPOINT_MOUNT) + 1:]

    def storage_unavailable(self) -> str | None:
        """Why the job's checkpoint folder cannot be put behind the storage layer here (None: it can):
        the layer is mounted on this machine over the host folder every pod's volume binds, so the
        cluster must be the local one, its shared folder a mount with shared propagation."""
        shared = self.profile.shared_dir if self.profile is not None else None
        if not shared:
            return ("storage faults need the pods' checkpoint volume on this machine (the local cluster's shared "
                    "folder: make cluster-up); on EKS volumes they are planned (docs/EKS.md)")
        storage = self.settings.storage
        if storage.kind is not m.StorageKind.HOST_PATH or storage.host_path != shared:
            return f"storage faults need the job's checkpoints on the cluster's shared folder {shared} (host path)"
        if not shared_mount(shared):
            return (f"the cluster's shared folder {shared} is not a mount with shared propagation, so a mount made "
                    "here would not reach its nodes (a cluster started before the storage faults): "
                    "make cluster-down && make cluster-up")
        return None

    def checkpoint_folder(self) -> CheckpointFolder | None:
        """The job's checkpoint folder on this machine where the pods' volume binds the local cluster's
        shared folder (a host path), else None: a cluster's volume is not on the runner's machine. Before
        a job starts (a fault asked whether it can act here), the whole shared folder as the pods mount it."""
        shared = self.profile.shared_dir if self.profile is not None else None
        storage = self.settings.storage
        if not shared or storage.kind is not m.StorageKind.HOST_PATH or storage.host_path != shared:
            return None
        if self.job is None:
            return CheckpointFolder(Path(shared), PurePosixPath(m.CHECKPOINT_MOUNT))
        return CheckpointFolder(Path(shared) / self.job.run_id, PurePosixPath(m.checkpoint_dir(self.job)))

    def _storage_folder(self, job: JobSpec) -> Path:
        reason = self.storage_unavailable()
        if reason is not None:
            raise SetupError(reason)
        assert self.profile is not None and self.profile.shared_dir
        return Path(self.profile.shared_dir) / job.run_id

    def _follow_logs(self, pod: str) -> None:
        with self._lock:
            if pod in self._followers or self.job is None:
                return
            follower = PodLogFollower(self.core.read_namespaced_pod_log, self.settings.namespace, pod,
                                      self.settings.job_kind.container, self.logs_dir / f"{pod}.log",
                                      lambda: self._instance(pod))
            self._followers[pod] = follower.start()

    def _instance(self, pod: str) -> Instance | None:
        return self.pods.instance(pod, self.settings.job_kind.container)

    # -- faults -----------------------------------------------------------------------
    def _offers(self) -> tuple[Capability, ...]:
        return kubernetes_capabilities(self)

    def _kill_node(self, node: str, *, graceful: bool, grace_s: float) -> Hit:
        return self.node_faults.kill_node(node, graceful=graceful, grace_s=grace_s)

    def kill_plan(self, node: str, *, graceful: bool = False) -> tuple[str, ...]:
        return self.node_faults.kill_plan(node, graceful=graceful)

    def pool_lost(self, machine: str, pod: str | None) -> None:
        """A fault took ``machine``: the node pool replaces it (after its delay) if it replaces nodes."""
        if self.pool is not None:
            self.pool.lost(machine, pod)

    def hold_back(self, node: str) -> None:
        """Keep the controller from replacing ``node`` (scaled down by one) and, with a
        provisioning delay on a cluster whose machines are not ours, bring it back after it."""
        opts = self.options
        if self._scaler is None or (opts.replace_lost_nodes and opts.provisioning_delay_s is None):
            return
        delay = opts.provisioning_delay_s if opts.replace_lost_nodes else None
        self._scaler.hold_back(node, delay, on_restore=lambda: self.timeline.emit(
            NodeEv.PROVISIONED, None, Provisioning(replaces=node)))
        if delay is not None:
            self.timeline.emit(NodeEv.PROVISIONING, None, Provisioning(replaces=node, delay_s=delay))


def shared_mount(path: str) -> bool:
    """Whether ``path`` is a mountpoint here whose propagation is shared (/proc/self/mountinfo's
    optional ``shared:N`` field): mounts made under it reach its slave copies (the cluster's nodes)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        left = line.partition(" - ")[0].split()
        if len(left) > 6 and left[4].replace("\\040", " ") == path and any(f.startswith("shared:") for f in left[6:]):
            return True
    return False
