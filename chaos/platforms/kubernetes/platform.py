"""The Kubernetes platform: the job as an ElasticJob or PyTorchJob on a real cluster.

A *node* of the job is a worker pod (one torchrun agent per pod, as the
controllers run it); the machines under them are Kubernetes nodes. The job,
its etcd and its checkpoint claim come from :mod:`k8s_manifests`; two watches
(:mod:`k8s_watch`) keep the platform's view of pods and machines current and
turn changes into ``node`` events; each worker pod's log is followed into
``nodes/<pod>.log`` (:mod:`k8s_logs`), which the LogFollower reads as it reads
the local platform's files. Faults go through :mod:`k8s_actions`.

The kubernetes client is imported here only, when a client has to be built
from a kubeconfig; tests pass clients pointed at a real API server instead.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.errors import InjectionFailed, PlatformError, SetupError
from chaos.events import NodeEv, RunnerEv, Timeline
from chaos.options import option, validate
from chaos.platforms import etcd_v2
from chaos.platforms.api import Hit, NodeInfo, NodePool, NodeState, Platform
from chaos.platforms.kubernetes import manifests as m
from chaos.platforms.kubernetes.actions import ClusterActions, create_error
from chaos.platforms.kubernetes.logs import Instance, PodLogFollower
from chaos.platforms.kubernetes.pods import MachineTracker, PodTracker
from chaos.platforms.kubernetes.portforward import PortForward
from chaos.platforms.kubernetes.scale import JobScaler
from chaos.platforms.kubernetes.watch import ObjectWatch, api_message, api_status
from chaos.spec import JobSpec
from chaos.waiting import eventually

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KubernetesOptions(NodePool):
    """Settings of the kubernetes platform (its node pool's, and these)."""

    kubeconfig: str | None = option(None, "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then "
                                          "in-cluster credentials)", metavar="PATH")
    context: str | None = option(None, "kubeconfig context (default: its current context)", flag="--kube-context",
                                 metavar="NAME")
    settings: m.KubeSettings = field(default_factory=m.KubeSettings)
    """Namespace, job kind, image, resources, placement, checkpoint storage."""
    etcd_endpoint: str | None = option(None, "HOST:PORT of the job's etcd as reachable from here (a NodePort, "
                                             "a load balancer); default: the in-cluster Service address when "
                                             "running in a pod, else `kubectl port-forward`", metavar="HOST:PORT")
    start_timeout_s: float = option(300.0, "how long starting waits for every worker pod to run (image pulls, "
                                           "autoscaling)", flag="--start-timeout", above=0, units="s")
    stop_timeout_s: float = option(60.0, "how long stopping waits for the run's pods to be gone",
                                   flag="--stop-timeout", above=0, units="s")
    watch_window_s: int = option(10, "server-side timeout of each watch request; the next one resumes where it "
                                     "ended", minimum=1, cli=False)
    kubectl: str = option("kubectl", "kubectl used for the etcd port-forward only", cli=False)
    provisioning_delay_s: float | None = option(None, "hold a lost worker's replacement back this long (the job "
                                                      "is scaled down, then up: the autoscaler's minutes); "
                                                      "default: as fast as the controller re-creates it",
                                                flag="--provisioning-delay", minimum=0, units="s")

    def __post_init__(self) -> None:
        validate(self)


class KubernetesPlatform(Platform):
    name = "kubernetes"
    Options = KubernetesOptions

    @classmethod
    def option_classes(cls) -> tuple[type, ...]:
        return (cls.Options, m.KubeSettings)

    @classmethod
    def make_options(cls, values: dict[str, Any]) -> Any:
        from chaos.platforms.kubernetes.options import make_options
        return make_options(cls.Options, dict(values), kind=cls.name == "kind")

    def node_pool(self) -> NodePool:
        return self.options

    def __init__(self, timeline: Timeline, work_dir: Path, options: KubernetesOptions | None = None, *,
                 api_client: Any = None, core_v1: Any = None, apps_v1: Any = None,
                 custom_objects: Any = None, policy_v1: Any = None) -> None:
        super().__init__(timeline, work_dir)
        self.options = options or KubernetesOptions()
        self.settings = self.options.settings
        self.core, self.apps, self.custom, self.policy = _clients(
            self.options, api_client, core_v1, apps_v1, custom_objects, policy_v1)
        self.actions = ClusterActions(self.core, self.settings.namespace, policy_v1=self.policy)
        self.pods = PodTracker(timeline)
        self.machines = MachineTracker(timeline)
        self._watches: list[ObjectWatch] = []
        self._followers: dict[str, PodLogFollower] = {}
        self._lock = threading.Lock()
        self._port_forward: PortForward | None = None
        self._created: list[m.Manifest] = []
        self._scaler: JobScaler | None = None

    # -- paths ----------------------------------------------------------------------
    @property
    def logs_dir(self) -> Path:
        return self.work_dir / "nodes"

    # -- lifecycle -------------------------------------------------------------------
    def _start(self, job: JobSpec) -> None:
        docs = m.render(job, self.settings)
        self._scaler = JobScaler(self.custom, self.settings, job.run_id, m.initial_replicas(job))
        self.pods, self.machines, self._created = PodTracker(self.timeline), MachineTracker(self.timeline), []
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.pods.on_new_pod = self._follow_logs
        self._watch(job)
        for doc in docs:
            self._create(doc)
            self._created.append(doc)
        self.timeline.emit(RunnerEv.MANIFESTS_APPLIED, kinds=[d["kind"] for d in docs],
                           namespace=self.settings.namespace, job_kind=self.settings.job_kind.value)
        self._wait_running(job)
        if job.rdzv.backend.needs_etcd():
            self._wait_etcd()

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
        try:
            if kind == "PersistentVolumeClaim":
                self.core.create_namespaced_persistent_volume_claim(ns, doc, _preload_content=False)
            elif kind == "Service":
                self.core.create_namespaced_service(ns, doc, _preload_content=False)
            elif kind == "Deployment":
                self.apps.create_namespaced_deployment(ns, doc, _preload_content=False)
            else:
                jk = self.settings.job_kind
                group, version = jk.api_version.split("/")
                self.custom.create_namespaced_custom_object(group, version, ns, jk.plural, doc,
                                                            _preload_content=False)
        except Exception as exc:
            raise PlatformError(create_error(doc, exc, self.settings)) from exc

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
        if self._scaler is not None:
            self._scaler.cancel()
        for doc in reversed(self._created):
            try:
                self._delete(doc)
            except Exception as exc:
                if api_status(exc) != 404:
                    errors.append(f"deleting {doc['kind']} {doc['metadata']['name']}: {api_message(exc)}")
        try:  # for clusters without a garbage collector, and faster everywhere
            self.core.delete_collection_namespaced_pod(self.settings.namespace,
                                                       label_selector=m.run_selector(self.job.run_id),
                                                       _preload_content=False)
        except Exception as exc:
            if api_status(exc) == 403:   # the garbage collector removes them with the job
                log.info("may not delete the run's pods directly: %s", api_message(exc))
            elif api_status(exc) != 404:
                errors.append(f"deleting the run's pods: {api_message(exc)}")
        self.pods.wait_all_gone(self.options.stop_timeout_s)
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
        ns, kind, name = self.settings.namespace, doc["kind"], doc["metadata"]["name"]
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        if kind == "PersistentVolumeClaim":
            self.core.delete_namespaced_persistent_volume_claim(name, ns, body=body, _preload_content=False)
        elif kind == "Service":
            self.core.delete_namespaced_service(name, ns, body=body, _preload_content=False)
        elif kind == "Deployment":
            self.apps.delete_namespaced_deployment(name, ns, body=body, _preload_content=False)
        else:
            jk = self.settings.job_kind
            group, version = jk.api_version.split("/")
            self.custom.delete_namespaced_custom_object(group, version, ns, jk.plural, name, body=body,
                                                        _preload_content=False)

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
        return held or self.pods.replacement_pending()

    def store_host(self) -> str | None:
        if self.job is None or self.job.rdzv.backend.needs_etcd():
            return None
        return m.worker_pod_name(self.job.run_id, 0)

    def etcd_endpoint(self) -> str | None:
        if self.job is None or not self.job.rdzv.backend.needs_etcd():
            return None
        if self.options.etcd_endpoint:
            return self.options.etcd_endpoint
        service = m.etcd_name(self.job.run_id)
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return f"{service}.{self.settings.namespace}.svc:{m.ETCD_PORT}"
        if self._port_forward is None:
            self._port_forward = PortForward(self.options.kubectl, self.settings.namespace, f"svc/{service}",
                                             m.ETCD_PORT, kubeconfig=self.options.kubeconfig,
                                             context=self.options.context, log_path=self.work_dir / "port-forward.log")
            self._port_forward.start()
        return self._port_forward.endpoint

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
    def _kill_node(self, node: str, *, graceful: bool, grace_s: float) -> Hit:
        grace = max(1, int(round(grace_s))) if graceful else 0
        opts = self.options
        if self._scaler is not None and (not opts.replace_lost_nodes or opts.provisioning_delay_s is not None):
            delay = opts.provisioning_delay_s if opts.replace_lost_nodes else None
            self._scaler.hold_back(node, delay, on_restore=lambda: self.timeline.emit(
                NodeEv.PROVISIONED, None, replaces=node))
            if delay is not None:
                self.timeline.emit(NodeEv.PROVISIONING, None, replaces=node, delay_s=delay)
        return self._delete_pod(node, grace_s=grace, uid=None)

    def delete_pod(self, pod: str, *, grace_s: int = 0, uid: str | None = None) -> Hit:
        """Delete a worker pod (grace 0: at once; else SIGTERM, SIGKILL after ``grace_s``).
        With ``uid``, only that incarnation. Blocks until it is gone (graceful: up to
        ``grace_s`` + 30 s). Raises InjectionFailed on 403/404/409."""
        self._require_node(pod)
        hit = self._delete_pod(pod, grace_s=grace_s, uid=uid)
        self.timeline.emit(NodeEv.LOST, pod, t=hit.at, action=hit.action, **hit.detail)
        return hit

    def _delete_pod(self, pod: str, *, grace_s: int, uid: str | None) -> Hit:
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
        self.timeline.emit(NodeEv.LOST, pod, t=at, action=hit.action, **hit.detail)
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
            self.timeline.emit(NodeEv.LOST, name, t=at, action="drain",
                               machine=(pod.get("spec") or {}).get("nodeName"))

    def delete_machine(self, machine: str) -> Hit:
        """Delete the Node object (the machine vanishes from the cluster's view; its pods
        are garbage-collected by the cluster; a kubelet that is still alive re-registers)."""
        at = time.time()
        pods = self.pods_on(machine)
        self.actions.delete_node(machine)
        for pod in pods:
            self.timeline.emit(NodeEv.LOST, pod, t=at, action="delete-node", machine=machine)
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


def _clients(options: KubernetesOptions, api_client: Any, core_v1: Any, apps_v1: Any, custom: Any,
             policy: Any) -> tuple[Any, Any, Any, Any]:
    """The API objects to use: the injected ones, else built from the kubeconfig."""
    if all(c is not None for c in (core_v1, apps_v1, custom)):
        return core_v1, apps_v1, custom, policy
    try:
        from kubernetes import client, config
    except ImportError as exc:
        raise SetupError("the kubernetes platform needs the kubernetes client: "
                         "pip install 'elastic-chaos[kubernetes]' (make install does)") from exc
    if api_client is None:
        api_client = _api_client_from_config(options, client, config)
    return (core_v1 or client.CoreV1Api(api_client), apps_v1 or client.AppsV1Api(api_client),
            custom or client.CustomObjectsApi(api_client), policy or client.PolicyV1Api(api_client))


def _api_client_from_config(options: KubernetesOptions, client: Any, config: Any) -> Any:
    path = options.kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if options.kubeconfig and not Path(options.kubeconfig).is_file():
        raise SetupError(f"--kubeconfig {options.kubeconfig} is not a file")
    try:
        if Path(path.split(os.pathsep)[0]).is_file():
            return config.new_client_from_config(config_file=path, context=options.context)
        config.load_incluster_config()
        return client.ApiClient()
    except Exception as exc:  # ConfigException and friends: say what to do
        raise SetupError(f"no usable Kubernetes credentials ({exc}); pass --kubeconfig PATH "
                         "(and --kube-context), set KUBECONFIG, or run inside the cluster") from exc

