"""The job kind that needs no operator: a StatefulSet of torchrun pods and the run's etcd.

kube-controller-manager keeps it alive on any cluster (the local one included):
the StatefulSet ``<run id>-worker`` (``podManagementPolicy: Parallel``) re-creates
a lost replica under its old name ``<run id>-worker-<i>`` once the old pod object
is gone, and drops the highest index when scaled down, like the operators do.
Its pods differ from the operators' in three ways, each handled here:

- **Restart policy.** A StatefulSet's pods restart their container whatever its
  exit code (``Always``). An agent that gave up (restarts exhausted, a closed or
  failed rendezvous) would then be restarted for ever, as a new participant of a
  rendezvous that may have moved on. So torchrun runs under :data:`SUPERVISOR`, a
  few lines of ``sh`` that behave like ElasticJob's ``restartPolicy: ExitCode``:
  a non-signal exit (0-127) is final (recorded on an emptyDir; the restarted
  container only idles), a signal death (128+) is retried by the kubelet.
- **PID 1.** The supervisor is the container's PID 1 and forwards SIGTERM to
  torchrun, which is then an ordinary process: SIGTERM reaches it as on a node
  (a Python PID 1 without a handler would ignore it) and it shuts its workers
  down, which checkpoint on their way out.
- **Addresses.** Where the cluster resolves Service names (``dns``) the workers
  find etcd as ``<run id>-etcd``; elsewhere by the etcd pod's IP, known once it
  runs (the platform starts etcd first). Each agent advertises its pod IP
  (``--local-addr $(POD_IP)``): without it rank 0 advertises its pod name, which
  resolves nowhere without DNS.
"""
from __future__ import annotations

from elastic_chaos.errors import SpecError
from elastic_chaos.platforms.kubernetes.manifests import (
    ROLE_LABEL,
    RUN_LABEL,
    _meta,
    initial_replicas,
    pod_template,
    program,
    rdzv_endpoint,
)
from elastic_chaos.platforms.kubernetes.settings import KubeSettings, Manifest
from elastic_chaos.platforms.worker_logs import pod_tee_args
from elastic_chaos.spec import JobSpec, RdzvBackend

MARK_DIR = "/run/elastic-chaos"
"""An emptyDir in every worker pod: it outlives a container restart, not the pod."""

SUPERVISOR = f"""\
mark={MARK_DIR}/agent-exit
if [ -s "$mark" ]; then
  echo "elastic-chaos: the agent exited with code $(cat "$mark") before this container restart; it stays down"
  trap 'kill "$idle" 2>/dev/null; exit 0' TERM INT
  while :; do sleep 3600 & idle=$!; wait "$idle"; done
fi
"$@" &
agent=$!
trap 'kill -TERM "$agent" 2>/dev/null' TERM INT
while :; do
  wait "$agent"; code=$?
  if [ "$code" -gt 128 ] && kill -0 "$agent" 2>/dev/null; then continue; fi
  break
done
if [ "$code" -lt 128 ]; then echo "$code" > "$mark"; fi
echo "elastic-chaos: the agent exited with code $code"
exit "$code"
"""
"""PID 1 of a worker container: runs ``"$@"`` (torchrun), forwards SIGTERM/SIGINT to it, and
makes a non-signal exit final (see the module docstring). POSIX sh (dash, busybox)."""

FINAL_EXIT_BELOW = 128
"""Exit codes below this are final under :data:`SUPERVISOR`; 128+N (killed by signal N) are retried."""


def final_exit(code: int | None) -> bool:
    """Whether a worker container that exited with ``code`` stays down (the supervisor's rule)."""
    return code is not None and 0 <= code < FINAL_EXIT_BELOW


def statefulset_name(run_id: str) -> str:
    """The StatefulSet; its pods are ``<this>-<i>``, the names the operators give too."""
    return f"{run_id}-worker"


def render(job: JobSpec, settings: KubeSettings, *, etcd_address: str | None, env: dict[str, str]) -> list[Manifest]:
    """The StatefulSet (and, on c10d, the headless Service that names worker-0's store)."""
    if job.rdzv.backend.needs_etcd() and not settings.dns and not etcd_address:
        raise SpecError("this cluster has no DNS: the statefulset job needs the etcd pod's IP (etcd_address); "
                        "the platform starts etcd first and passes it")
    if job.rdzv.backend is RdzvBackend.C10D and not settings.dns:
        raise SpecError("c10d on a statefulset names its store by worker-0's DNS name, and this cluster has no "
                        "DNS; use the etcd-v2 backend (or a cluster with CoreDNS)")
    docs = [statefulset(job, settings, etcd_address=etcd_address, env=env)]
    if job.rdzv.backend is RdzvBackend.C10D:
        docs.insert(0, headless_service(job, settings))
    return docs


def torchrun_args(job: JobSpec, settings: KubeSettings, etcd_address: str | None) -> list[str]:
    """torchrun's flags, as the local platform passes them, then the program."""
    endpoint = rdzv_endpoint(job, settings, etcd_address)
    if job.rdzv.backend is RdzvBackend.C10D:
        endpoint = f"{store_host(job, settings)}:{settings.c10d_port}"
    args = [f"--nnodes={job.nodes}", f"--nproc-per-node={job.nproc_per_node}",
            f"--rdzv-backend={job.rdzv.backend.value}", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={job.run_id}",
            f"--max-restarts={job.max_restarts}", "--local-addr=$(POD_IP)", *pod_tee_args()]
    conf = job.rdzv.conf()
    if conf:
        args.append("--rdzv-conf=" + ",".join(f"{k}={v}" for k, v in conf.items()))
    if job.monitor_interval is not None:
        args.append(f"--monitor-interval={job.monitor_interval}")
    return args + program(job)


def store_host(job: JobSpec, settings: KubeSettings) -> str:
    """worker-0's DNS name through the headless Service (c10d's store host)."""
    return f"{statefulset_name(job.run_id)}-0.{statefulset_name(job.run_id)}.{settings.namespace}.svc.cluster.local"


def statefulset(job: JobSpec, settings: KubeSettings, *, etcd_address: str | None,
                env: dict[str, str]) -> Manifest:
    command = ["/bin/sh", "-c", SUPERVISOR, "elastic-chaos-agent"]
    args = ["python3", *job.launcher, *torchrun_args(job, settings, etcd_address)]
    template = pod_template(job, settings, command, args, env=env)
    pod = template["spec"]
    pod["enableServiceLinks"] = False     # no Service environment: nothing here uses it
    pod["volumes"].append({"name": "agent-mark", "emptyDir": {}})
    pod["containers"][0]["volumeMounts"].append({"name": "agent-mark", "mountPath": MARK_DIR})
    if job.rdzv.backend is RdzvBackend.C10D:
        pod["subdomain"] = statefulset_name(job.run_id)
    name = statefulset_name(job.run_id)
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _meta(name, job.run_id, "job", settings),
            "spec": {"replicas": initial_replicas(job), "podManagementPolicy": "Parallel", "serviceName": name,
                     "selector": {"matchLabels": {RUN_LABEL: job.run_id, ROLE_LABEL: "worker"}},
                     "template": template}}


def headless_service(job: JobSpec, settings: KubeSettings) -> Manifest:
    """``<run id>-worker``, clusterIP None: gives each pod a DNS name (c10d's store on worker-0)."""
    name = statefulset_name(job.run_id)
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(name, job.run_id, "workers", settings),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": {RUN_LABEL: job.run_id, ROLE_LABEL: "worker"},
                     "ports": [{"name": "c10d", "port": settings.c10d_port}]}}
