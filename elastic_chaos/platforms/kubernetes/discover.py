"""Find a running Kubernetes job's rendezvous, for ``elastic-chaos watch --platform kubernetes --job NAME``.

The watch itself is the etcd watch of elastic_chaos.cli.watching; what Kubernetes adds is
*where*: the job object (a TorchElastic ElasticJob or a Kubeflow PyTorchJob
with an elasticPolicy) names the rendezvous host, port, id and backend, and
the etcd Service is reached from here through ``kubectl port-forward`` (or
directly by its Service name when the watch runs inside the cluster, or at
an address given with ``--etcd``). Only reads: a GET of the job object.
"""
from __future__ import annotations

__all__ = ["custom_objects_api", "etcd_endpoint", "locate"]

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_chaos.errors import PlatformError, SetupError, SpecError
from elastic_chaos.platforms.kubernetes.clients import custom_objects_api
from elastic_chaos.platforms.kubernetes.portforward import PortForward
from elastic_chaos.platforms.kubernetes.watch import api_message, api_status

# (group, version, plural, kind) of the job kinds an elastic job is run with
JOB_KINDS = (("elastic.pytorch.org", "v1alpha1", "elasticjobs", "ElasticJob"),
             ("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"))
STATEFULSETS = (("apps", "v1", "statefulsets", "StatefulSet-of-run"), ("apps", "v1", "statefulsets", "StatefulSet"))
"""The statefulset job kind's ``<run id>-worker``, then a StatefulSet named as given."""
DEFAULT_ETCD_PORT = 2379


@dataclass(frozen=True)
class JobRendezvous:
    kind: str
    name: str
    namespace: str
    run_id: str
    backend: str
    host: str
    port: int
    forward: str | None = None
    """What ``kubectl port-forward`` aims at (default ``svc/<host>``): the etcd Deployment
    where the workers reach etcd by pod IP (a cluster without DNS)."""

    def in_cluster_endpoint(self) -> str:
        host = self.host if "." in self.host else f"{self.host}.{self.namespace}.svc"
        return f"{host}:{self.port}"


def locate(custom: Any, namespace: str, name: str) -> JobRendezvous:
    """The rendezvous of the job ``name``: ElasticJob first, then PyTorchJob, then the
    statefulset kind's StatefulSet (``<name>-worker``, or ``name``; read through the same
    generic client). Raises SpecError when there is no such job or it cannot be watched (c10d)."""
    for group, version, plural, kind in (*JOB_KINDS, *STATEFULSETS):
        obj_name = f"{name}-worker" if kind == "StatefulSet-of-run" else name
        try:
            obj = custom.get_namespaced_custom_object(group, version, namespace, plural, obj_name)
        except Exception as exc:  # noqa: BLE001 - the client's ApiException, judged by status
            status = api_status(exc)
            if status == 404:
                continue
            if status == 403:
                raise SetupError(f"reading {kind} {namespace}/{name} is forbidden (HTTP 403 "
                                 f"{api_message(exc)}): the watch needs `get` on {plural}.{group}") from exc
            raise PlatformError(f"reading {kind} {namespace}/{name}: {api_message(exc)}") from exc
        if kind == "ElasticJob":
            rdzv = _elasticjob(obj, name, namespace)
        elif kind == "PyTorchJob":
            rdzv = _pytorchjob(obj, name, namespace)
        else:
            rdzv = _statefulset(obj, obj_name, namespace)
        if rdzv.backend not in ("etcd-v2",):
            raise SpecError(f"{kind} {namespace}/{name} uses the {rdzv.backend!r} rendezvous backend; a passive "
                            "watch reads torch's dynamic rendezvous state from etcd (backend etcd-v2). c10d keeps "
                            "it in a TCPStore inside the job, the legacy 'etcd' backend in another format")
        return rdzv
    raise SpecError(f"no ElasticJob, PyTorchJob or StatefulSet named {name!r} (or {name}-worker) in namespace "
                    f"{namespace!r} (kubectl get elasticjobs,pytorchjobs,statefulsets -A lists them; pass --namespace)")


def _spec(obj: Any) -> dict[str, Any]:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    return spec if isinstance(spec, dict) else {}


def _split(endpoint: str, default_port: int) -> tuple[str, int]:
    host, sep, port = endpoint.rpartition(":")
    if sep and port.isdigit():
        return host, int(port)
    return endpoint, default_port


def _elasticjob(obj: Any, name: str, namespace: str) -> JobRendezvous:
    spec = _spec(obj)
    endpoint = str(spec.get("rdzvEndpoint") or "")
    if not endpoint:
        raise SpecError(f"ElasticJob {namespace}/{name} has no spec.rdzvEndpoint")
    host, port = _split(endpoint, DEFAULT_ETCD_PORT)
    # the TorchElastic controller prepends --rdzv_backend=etcd; torchrun keeps the last one given
    backend = "etcd"
    for container in _containers(spec.get("replicaSpecs")):
        backend = _last_backend([*container.get("command", []), *container.get("args", [])], backend)
    return JobRendezvous("ElasticJob", name, namespace, run_id=name, backend=backend, host=host, port=port)


def _pytorchjob(obj: Any, name: str, namespace: str) -> JobRendezvous:
    policy = _spec(obj).get("elasticPolicy")
    if not isinstance(policy, dict):
        raise SpecError(f"PyTorchJob {namespace}/{name} has no elasticPolicy: it is not an elastic job")
    host = str(policy.get("rdzvHost") or "")
    if not host:
        raise SpecError(f"PyTorchJob {namespace}/{name} has no elasticPolicy.rdzvHost")
    return JobRendezvous("PyTorchJob", name, namespace, run_id=str(policy.get("rdzvId") or name),
                         backend=str(policy.get("rdzvBackend") or "c10d"), host=host,
                         port=int(policy.get("rdzvPort") or DEFAULT_ETCD_PORT))


def _statefulset(obj: Any, name: str, namespace: str) -> JobRendezvous:
    """torchrun's own flags in the worker container (``--rdzv-backend=``, ``--rdzv-endpoint=``,
    ``--rdzv-id=``): the statefulset kind's, or anyone's StatefulSet of torchrun pods."""
    pod = ((_spec(obj).get("template") or {}).get("spec") or {})
    args = [str(a) for c in pod.get("containers") or [] for a in [*c.get("command", []), *c.get("args", [])]]
    flags = {}
    for arg in args:
        key, eq, value = arg.partition("=")
        if eq and key.replace("_", "-") in ("--rdzv-backend", "--rdzv-endpoint", "--rdzv-id"):
            flags[key.replace("_", "-")] = value
    if "--rdzv-endpoint" not in flags:
        raise SpecError(f"StatefulSet {namespace}/{name} runs no torchrun with --rdzv-endpoint=HOST:PORT")
    host, port = _split(flags["--rdzv-endpoint"], DEFAULT_ETCD_PORT)
    run_id = flags.get("--rdzv-id") or name
    by_ip = host.replace(".", "").isdigit()
    return JobRendezvous("StatefulSet", name, namespace, run_id=run_id,
                         backend=_last_backend(args, "static"), host=host, port=port,
                         forward=f"deploy/{run_id}-etcd" if by_ip else None)


def _containers(replica_specs: Any) -> list[dict[str, Any]]:
    out = []
    for replica in (replica_specs or {}).values() if isinstance(replica_specs, dict) else []:
        pod = ((replica or {}).get("template") or {}).get("spec") or {}
        out += [c for c in pod.get("containers") or [] if isinstance(c, dict)]
    return out


def _last_backend(args: list[Any], current: str) -> str:
    items = [str(a) for a in args]
    for i, arg in enumerate(items):
        for flag in ("--rdzv_backend", "--rdzv-backend"):
            if arg.startswith(flag + "="):
                current = arg.split("=", 1)[1]
            elif arg == flag and i + 1 < len(items):
                current = items[i + 1]
    return current


@contextlib.contextmanager
def etcd_endpoint(rdzv: JobRendezvous, *, explicit: str | None, kubectl: str = "kubectl",
                  kubeconfig: str | None = None, context: str | None = None,
                  log_dir: Path | None = None) -> Iterator[str]:
    """host:port of the job's etcd from here: ``explicit``, the Service name inside the
    cluster, else a ``kubectl port-forward`` to the Service, stopped on exit."""
    if explicit:
        yield explicit
        return
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        yield rdzv.in_cluster_endpoint()
        return
    forward = PortForward(kubectl, rdzv.namespace, rdzv.forward or f"svc/{rdzv.host.split('.')[0]}", rdzv.port,
                          kubeconfig=kubeconfig, context=context,
                          log_path=log_dir / "port-forward.log" if log_dir else None)
    forward.start()
    try:
        yield forward.endpoint
    finally:
        forward.stop()
