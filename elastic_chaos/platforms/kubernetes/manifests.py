"""Render a JobSpec as Kubernetes manifests: the job, its etcd, its checkpoint volume.

Pure functions over frozen dataclasses (:mod:`k8s_settings`), no client import: the Kubernetes
platform applies what this renders, ``elastic-chaos manifest`` prints it for
review (or for GitOps), and unit tests check it without a cluster.

Three job kinds:

- ``StatefulSet`` (the default; :mod:`k8s_statefulset`): plain Kubernetes
  objects that kube-controller-manager keeps alive, no operator, so it runs on
  any cluster. Pods ``<run id>-worker-<i>``, torchrun under a small supervisor
  that keeps an agent that gave up down (ElasticJob's exit-code policy), the
  run's etcd reached by pod IP where the cluster has no DNS.
- ``ElasticJob`` (``elastic.pytorch.org/v1alpha1``, the TorchElastic
  controller). The controller *prepends* ``--rdzv_backend=etcd
  --rdzv_endpoint=<rdzvEndpoint> --rdzv_id=<job name> --nnodes=MIN:MAX`` to
  the container args, so the args rendered here repeat ``--rdzv_backend``
  (torchrun keeps the last one: etcd-v2, the dynamic rendezvous the watchers
  decode, or c10d) and the job is named after the run id.
- ``PyTorchJob`` (``kubeflow.org/v1``) with ``elasticPolicy``: the training
  operator passes the rendezvous settings as ``PET_*`` environment variables.
  Without ``rdzvHost`` its c10d store lives on ``<job>-worker-0``, a single
  point of failure; rendered explicitly here so a scenario can aim at it.

Every kind runs the same program (:func:`program`): the reference trainer with
the job's arguments, or the user's script (through ``elastic_chaos.trainer.launch`` when a
backend is forced), in the job's working directory on the shared volume, with
``TZ=UTC`` so the agents' log times are read in the zone they are written in.
With ``node_local_workdir`` a worker works on a disk of its own instead: an
``emptyDir`` per pod, kept across its container's restarts and gone with the pod
(a lost machine, a deleted or evicted pod), so a re-created pod starts empty.

Every object carries ``elastic-chaos/run-id`` so the platform finds (and
deletes) exactly what one run created.
"""
from __future__ import annotations

from elastic_chaos.errors import SpecError
from elastic_chaos.platforms.kubernetes.settings import (
    CAPACITY_LABEL,
    CHECKPOINT_MOUNT,
    DNS_LABEL,
    ETCD_IMAGE,
    SPOT_TAINT,
    TRAINER_IMAGE,
    CheckpointStorage,
    JobKind,
    KubeSettings,
    Manifest,
    StorageKind,
    Toleration,
    eks_gpu_settings,
    kind_settings,
)
from elastic_chaos.platforms.worker_logs import pod_tee_args
from elastic_chaos.spec import LOCAL_DIR_VAR, SHARED_DIR_VAR, JobSpec

NODE_DISK_MOUNT = "/node-disk"
"""With JobSpec.node_local_workdir: the pod's emptyDir, its working directory (its node's own disk)."""

RUN_LABEL = "elastic-chaos/run-id"
ROLE_LABEL = "elastic-chaos/role"
ETCD_PORT = 2379


# -- names ---------------------------------------------------------------------
def check_run_id(run_id: str) -> str:
    """The run id names the job and its pods (``<run id>-worker-N``): a short DNS label."""
    if not DNS_LABEL.match(run_id) or len(run_id) > 40:
        raise SpecError(f"run id {run_id!r} cannot name Kubernetes objects: use at most 40 lower-case "
                        "letters, digits and '-', starting with a letter (e.g. chaos-1a2b3c4d)")
    return run_id


def etcd_name(run_id: str) -> str:
    return f"{run_id}-etcd"


def claim_name(run_id: str, settings: KubeSettings) -> str:
    return settings.storage.existing_claim or f"{run_id}-checkpoints"


def worker_pod_name(run_id: str, index: int) -> str:
    """The name both controllers give replica ``index`` (and its per-pod Service)."""
    return f"{run_id}-worker-{index}"


def initial_replicas(job: JobSpec) -> int:
    """Worker replicas the job starts with (JobSpec.start_nodes, default MAX)."""
    return int(getattr(job, "initial_nodes", job.max_nodes))


def run_selector(run_id: str, role: str | None = None) -> str:
    return f"{RUN_LABEL}={run_id}" + (f",{ROLE_LABEL}={role}" if role else "")


def _labels(run_id: str, role: str) -> dict[str, str]:
    return {RUN_LABEL: run_id, ROLE_LABEL: role, "app.kubernetes.io/managed-by": "elastic-chaos"}


def _meta(name: str, run_id: str, role: str, settings: KubeSettings) -> Manifest:
    return {"name": name, "namespace": settings.namespace, "labels": _labels(run_id, role)}


# -- the whole run (elastic_chaos.platforms.kubernetes.jobs.render: this, then the job kind's objects) --
def render_base(job: JobSpec, settings: KubeSettings) -> list[Manifest]:
    """What the job needs before its pods: the checkpoint claim, etcd (Deployment, and its
    Service where the cluster resolves Service names or an operator needs one)."""
    check_run_id(job.run_id)
    if settings.gpus_per_node and job.nproc_per_node != settings.gpus_per_node:
        raise SpecError(f"nproc_per_node is {job.nproc_per_node} but each pod gets {settings.gpus_per_node} "
                        "GPUs: set --nproc-per-node to the GPUs per node (one worker per GPU)")
    docs: list[Manifest] = []
    if settings.storage.kind is StorageKind.PVC and settings.storage.existing_claim is None:
        docs.append(checkpoint_claim(job.run_id, settings))
    if job.rdzv.backend.needs_etcd():
        docs.append(etcd_deployment(job.run_id, settings))
        if settings.dns or settings.job_kind.needs_operator or settings.etcd_node_port is not None:
            docs.append(etcd_service(job.run_id, settings))
    return docs


def checkpoint_claim(run_id: str, settings: KubeSettings) -> Manifest:
    spec: Manifest = {"accessModes": [settings.storage.access_mode],
                      "resources": {"requests": {"storage": settings.storage.size}}}
    if settings.storage.storage_class:
        spec["storageClassName"] = settings.storage.storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": _meta(claim_name(run_id, settings), run_id, "checkpoints", settings), "spec": spec}


ETCD_DATA = "/var/lib/etcd"
ETCD_HOLD = f"{ETCD_DATA}/elastic-chaos-hold"
"""While this file exists the etcd loop keeps etcd down (the etcd-outage fault, ``crash``)."""
ETCD_PID = f"{ETCD_DATA}/elastic-chaos-etcd.pid"

ETCD_LOOP = f"""\
trap 'kill -TERM "$pid" 2>/dev/null; exit 0' TERM INT
while :; do
  if [ ! -e {ETCD_HOLD} ]; then
    "$@" &
    pid=$!
    echo "$pid" > {ETCD_PID}
    wait "$pid"
    echo "elastic-chaos: etcd exited ($?)"
  fi
  sleep 0.2
done
"""
"""etcd's container command where the image has a shell (``etcd_shell``): etcd runs as a child
of this loop, so the etcd-outage fault can SIGKILL it (and hold it down while the hold file
exists) or SIGSTOP/SIGCONT it from ``kubectl exec``, and it comes back in the same pod, at the
same address, with its data."""


def etcd_command() -> list[str]:
    """etcd 3.x with the v2 API, serving clients on every address, advertising the pod's IP."""
    return ["/usr/local/bin/etcd", "--name", "etcd", f"--data-dir={ETCD_DATA}/data", "--enable-v2=true",
            f"--listen-client-urls=http://0.0.0.0:{ETCD_PORT}",
            f"--advertise-client-urls=http://$(POD_IP):{ETCD_PORT}",
            "--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
            "--initial-cluster=etcd=http://127.0.0.1:2380", "--initial-cluster-state=new"]


def etcd_deployment(run_id: str, settings: KubeSettings) -> Manifest:
    """One etcd per job with the v2 API on (seeds: one etcd per training run)."""
    name = etcd_name(run_id)
    command = etcd_command()
    if settings.etcd_shell:
        command = ["/bin/sh", "-c", ETCD_LOOP, "etcd-loop", *command]
    container: Manifest = {
        "name": "etcd", "image": settings.etcd_image, "imagePullPolicy": settings.image_pull_policy,
        "command": command,
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "client", "containerPort": ETCD_PORT}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": ETCD_PORT}, "periodSeconds": 2},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
        "volumeMounts": [{"name": "data", "mountPath": ETCD_DATA}],
    }
    pod: Manifest = {"containers": [container], "volumes": [{"name": "data", "emptyDir": {}}],
                     "terminationGracePeriodSeconds": 5, "enableServiceLinks": False}
    if settings.etcd_node_selector:
        pod["nodeSelector"] = dict(settings.etcd_node_selector)
    labels = _labels(run_id, "etcd")
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(name, run_id, "etcd", settings),
            "spec": {"replicas": 1, "strategy": {"type": "Recreate"},
                     "selector": {"matchLabels": {RUN_LABEL: run_id, ROLE_LABEL: "etcd"}},
                     "template": {"metadata": {"labels": labels}, "spec": pod}}}


def etcd_service(run_id: str, settings: KubeSettings) -> Manifest:
    port: Manifest = {"name": "client", "port": ETCD_PORT, "targetPort": ETCD_PORT, "protocol": "TCP"}
    spec: Manifest = {"selector": {RUN_LABEL: run_id, ROLE_LABEL: "etcd"}, "ports": [port]}
    if settings.etcd_node_port is not None:
        spec["type"] = "NodePort"
        port["nodePort"] = settings.etcd_node_port
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _meta(etcd_name(run_id), run_id, "etcd", settings), "spec": spec}


# -- the job ---------------------------------------------------------------------
def job_manifest(job: JobSpec, settings: KubeSettings, *, env: dict[str, str] | None = None) -> Manifest:
    """The ElasticJob or PyTorchJob (the statefulset kind: elastic_chaos.platforms.kubernetes.jobs.job_manifests)."""
    if settings.job_kind is JobKind.ELASTICJOB:
        return elasticjob(job, settings, env=env)
    if settings.job_kind is JobKind.PYTORCHJOB:
        return pytorchjob(job, settings, env=env)
    raise SpecError(f"{settings.job_kind.value} is not one object: use "
                    "elastic_chaos.platforms.kubernetes.jobs.job_manifests()")


def rdzv_endpoint(job: JobSpec, settings: KubeSettings, etcd_address: str | None = None) -> str:
    """host:port the agents rendezvous at, as seen from inside the cluster: etcd's pod IP when
    given, else its Service name; worker-0 on c10d."""
    if job.rdzv.backend.needs_etcd():
        return f"{etcd_address or etcd_name(job.run_id)}:{ETCD_PORT}"
    return f"{worker_pod_name(job.run_id, 0)}:{settings.c10d_port}"


def elasticjob(job: JobSpec, settings: KubeSettings, *, env: dict[str, str] | None = None) -> Manifest:
    args = [f"--rdzv_backend={job.rdzv.backend.value}", *_launcher_args(job, settings)]
    template = pod_template(job, settings, ["python", *job.launcher], args, env=env)
    return {
        "apiVersion": JobKind.ELASTICJOB.api_version, "kind": JobKind.ELASTICJOB.kind,
        "metadata": _meta(job.run_id, job.run_id, "job", settings),
        "spec": {"rdzvEndpoint": rdzv_endpoint(job, settings),
                 "minReplicas": job.min_nodes, "maxReplicas": job.max_nodes,
                 "replicaSpecs": {"Worker": {"replicas": initial_replicas(job), "restartPolicy": "ExitCode",
                                             "template": template}}},
    }


def pytorchjob(job: JobSpec, settings: KubeSettings, *, env: dict[str, str] | None = None) -> Manifest:
    host, _, port = rdzv_endpoint(job, settings).rpartition(":")
    policy: Manifest = {
        "rdzvBackend": job.rdzv.backend.value, "rdzvHost": host, "rdzvPort": int(port),
        "rdzvId": job.run_id, "minReplicas": job.min_nodes, "maxReplicas": job.max_nodes,
        "maxRestarts": job.max_restarts, "nProcPerNode": job.nproc_per_node,
    }
    conf = job.rdzv.conf()
    if conf:
        policy["rdzvConf"] = [{"key": k, "value": v} for k, v in conf.items()]
    template = pod_template(job, settings, ["python", *job.launcher],
                            _launcher_args(job, settings, rdzv_in_args=False), env=env)
    return {
        "apiVersion": JobKind.PYTORCHJOB.api_version, "kind": JobKind.PYTORCHJOB.kind,
        "metadata": _meta(job.run_id, job.run_id, "job", settings),
        "spec": {"elasticPolicy": policy,
                 "pytorchReplicaSpecs": {"Worker": {"replicas": initial_replicas(job), "restartPolicy": "OnFailure",
                                                    "template": template}}},
    }


def _launcher_args(job: JobSpec, settings: KubeSettings, *, rdzv_in_args: bool = True) -> list[str]:
    """torchrun arguments after what the controller sets, then the training program. The workers'
    output is teed (elastic_chaos.platforms.worker_logs): the pod's log holds their lines prefixed."""
    args = [f"--nproc_per_node={job.nproc_per_node}", *pod_tee_args("_")]
    if rdzv_in_args:  # ElasticJob: max_restarts and rdzv_conf are not part of its spec
        args.append(f"--max_restarts={job.max_restarts}")
        conf = job.rdzv.conf()
        if conf:
            args.append("--rdzv_conf=" + ",".join(f"{k}={v}" for k, v in conf.items()))
    if job.monitor_interval is not None:
        args.append(f"--monitor_interval={job.monitor_interval}")
    return args + program(job)


def program(job: JobSpec) -> list[str]:
    """What torchrun runs on every node: the user's script (through ``elastic_chaos.trainer.launch`` when
    ``backend`` is forced: the image must have the trainer package then), or the reference
    trainer with the job's arguments (backend, collective timeout, ...), as on every platform."""
    if job.script:
        shim = ["-m", "elastic_chaos.trainer.launch", "--backend", job.backend.value] if job.backend else []
        return [*shim, *job.script]
    return ["-m", "elastic_chaos.trainer.train", "--checkpoint-dir", checkpoint_dir(job), *job.trainer_command_args()]


def checkpoint_dir(job: JobSpec) -> str:
    return f"{CHECKPOINT_MOUNT}/{job.run_id}"


def workdir(job: JobSpec) -> str:
    """The workers' working directory in the pod: ``JobSpec.workdir`` when absolute, else that
    folder (default ``workdir``) under the run's folder on the shared volume, which the kubelet
    creates: a script's relative paths land where every node (and, with a host-path volume,
    this machine) sees them."""
    if job.workdir and job.workdir.startswith("/"):
        return job.workdir
    return f"{checkpoint_dir(job)}/{(job.workdir or 'workdir').strip('/')}"


def pod_template(job: JobSpec, settings: KubeSettings, command: list[str], args: list[str], *,
                 env: dict[str, str] | None = None) -> Manifest:
    """The worker pod: trainer container, /dev/shm, checkpoints, placement."""
    spec: Manifest = {
        "terminationGracePeriodSeconds": settings.termination_grace_s,
        "containers": [worker_container(job, settings, command, args, env=env)],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}},
                    _checkpoint_volume(job.run_id, settings)],
    }
    if job.node_local_workdir:  # the pod's own disk: kept across container restarts, gone with the pod
        spec["volumes"].append({"name": "node-disk", "emptyDir": {}})
    if settings.tolerations:
        spec["tolerations"] = [t.to_manifest() for t in settings.tolerations]
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    if settings.one_pod_per_node:
        term = {"labelSelector": {"matchLabels": {RUN_LABEL: job.run_id, ROLE_LABEL: "worker"}},
                "topologyKey": "kubernetes.io/hostname"}
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    if settings.service_account:
        spec["serviceAccountName"] = settings.service_account
    return {"metadata": {"labels": _labels(job.run_id, "worker")}, "spec": spec}


FIELD_ENV = {"POD_IP": "status.podIP", "NODE_NAME": "spec.nodeName", "ELASTIC_CHAOS_NODE_NAME": "metadata.name"}
"""Set from the pod itself (the downward API); ``$(POD_IP)`` in the arguments is expanded by the kubelet."""


def worker_container(job: JobSpec, settings: KubeSettings, command: list[str], args: list[str], *,
                     env: dict[str, str] | None = None) -> Manifest:
    values = {"PYTHONUNBUFFERED": "1", "LOGLEVEL": "INFO", "TZ": "UTC", "CHECKPOINT_DIR": checkpoint_dir(job),
              **(env or {}), **job.node_env()}
    if job.node_local_workdir:
        values.update({LOCAL_DIR_VAR: NODE_DISK_MOUNT, SHARED_DIR_VAR: workdir(job)})
    env_list: list[Manifest] = [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": path}}}
                                for k, path in FIELD_ENV.items()]
    env_list += [{"name": k, "value": v} for k, v in values.items()]
    container: Manifest = {
        "name": settings.job_kind.container, "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy, "command": command, "args": args, "env": env_list,
        "workingDir": NODE_DISK_MOUNT if job.node_local_workdir else workdir(job),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                         {"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT}],
    }
    if job.node_local_workdir:
        container["volumeMounts"].append({"name": "node-disk", "mountPath": NODE_DISK_MOUNT})
    resources = _resources(settings)
    if resources:
        container["resources"] = resources
    if not job.rdzv.backend.needs_etcd():
        port_name = "pytorchjob-port" if settings.job_kind is JobKind.PYTORCHJOB else "c10d"
        container["ports"] = [{"name": port_name, "containerPort": settings.c10d_port}]
    return container


def _resources(settings: KubeSettings) -> Manifest:
    amounts: dict[str, str] = {}
    if settings.cpu:
        amounts["cpu"] = settings.cpu
    if settings.memory:
        amounts["memory"] = settings.memory
    if settings.gpus_per_node:
        amounts["nvidia.com/gpu"] = str(settings.gpus_per_node)
    if settings.efa_per_node:
        amounts["vpc.amazonaws.com/efa"] = str(settings.efa_per_node)
    if not amounts:
        return {}
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _checkpoint_volume(run_id: str, settings: KubeSettings) -> Manifest:
    if settings.storage.kind is StorageKind.HOST_PATH:
        return {"name": "checkpoints", "hostPath": {"path": settings.storage.host_path, "type": "DirectoryOrCreate"}}
    return {"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim_name(run_id, settings)}}


def to_yaml(docs: list[Manifest]) -> str:
    """A multi-document YAML stream (``kubectl apply -f -`` reads it)."""
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - installed with the kubernetes extra
        from elastic_chaos.errors import SetupError
        raise SetupError("printing manifests needs PyYAML: pip install 'elastic-chaos[kubernetes]'") from exc
    return str(yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False))


__all__ = [  # the settings live in k8s_settings; callers use them through this module too
    "CAPACITY_LABEL", "CHECKPOINT_MOUNT", "ETCD_HOLD", "ETCD_IMAGE", "ETCD_PID", "ETCD_PORT", "RUN_LABEL",
    "NODE_DISK_MOUNT", "ROLE_LABEL", "SPOT_TAINT", "TRAINER_IMAGE", "CheckpointStorage", "JobKind", "KubeSettings",
    "Manifest",
    "StorageKind", "Toleration", "check_run_id", "checkpoint_claim", "checkpoint_dir", "claim_name",
    "eks_gpu_settings", "elasticjob", "etcd_deployment", "etcd_name", "etcd_service", "initial_replicas",
    "job_manifest", "kind_settings", "pod_template", "program", "pytorchjob", "rdzv_endpoint",
    "render_base", "run_selector", "to_yaml", "worker_container", "worker_pod_name", "workdir",
]
