"""Play the cluster parts a bare kube-apiserver lacks: controller, scheduler, kubelet.

This is a stand-in, and says so: the real TorchElastic controller, the
training operator, kube-scheduler and the kubelet cannot run here (no
Docker). It is deliberately small and only does what the tests need, all
through the real API server with the admin client:

- controller: for every ElasticJob / PyTorchJob in its namespace, keep pods
  ``<job>-worker-<i>`` for i < replicas (created from the template, with the
  arguments / PET_* variables the real controllers add); for every StatefulSet,
  pods ``<statefulset>-<i>`` (the statefulset job kind's ``<run>-worker-<i>``);
- scheduler: bind unbound pods to a Ready, schedulable node that matches the
  pod's nodeSelector, whose NoSchedule taints it tolerates, and that runs no
  other worker of the same run (the anti-affinity the manifests ask for);
- kubelet: mark bound pods Running, finish graceful deletions (recording the
  grace period asked for), restart containers on request;
- log endpoint: a loopback HTTPS server answering the apiserver's
  ``/containerLogs/...`` proxy requests (follow, timestamps, previous) from an
  in-memory log per container instance.
"""
from __future__ import annotations

import copy
import datetime
import http.server
import json
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JOB_KINDS = (("elastic.pytorch.org", "v1alpha1", "elasticjobs", "ElasticJob"),
             ("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"))


def rfc3339nano(t: float | None = None) -> str:
    """The kubelet's timestamp format (trailing zeros of the fraction trimmed)."""
    ns = time.time_ns() if t is None else int(t * 1e9)
    whole = datetime.datetime.fromtimestamp(ns // 1_000_000_000, datetime.timezone.utc)
    frac = f"{ns % 1_000_000_000:09d}".rstrip("0")
    return whole.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def raw(resp: Any) -> Any:
    return json.loads(resp.data)


# -- container logs -------------------------------------------------------------------
@dataclass
class _Log:
    lines: list[str] = field(default_factory=list)   # "<timestamp> <text>"
    ended: bool = False


class LogStore:
    """Container output by (namespace, pod, container): one log per container instance."""

    def __init__(self) -> None:
        self._logs: dict[tuple[str, str, str], list[_Log]] = {}
        self.cond = threading.Condition()
        self.closing = False

    def open(self, ns: str, pod: str, container: str) -> None:
        with self.cond:
            for log in self._logs.get((ns, pod, container), []):
                log.ended = True
            self._logs.setdefault((ns, pod, container), []).append(_Log())
            self.cond.notify_all()

    def write(self, ns: str, pod: str, container: str, *texts: str, at: float | None = None) -> None:
        with self.cond:
            log = self._logs[(ns, pod, container)][-1]
            log.lines += [f"{rfc3339nano(at)} {t}" for t in texts]
            self.cond.notify_all()

    def end(self, ns: str, pod: str, container: str) -> None:
        with self.cond:
            for log in self._logs.get((ns, pod, container), []):
                log.ended = True
            self.cond.notify_all()

    def get(self, ns: str, pod: str, container: str, previous: bool) -> _Log | None:
        with self.cond:
            logs = self._logs.get((ns, pod, container), [])
            want = -2 if previous else -1
            return logs[want] if len(logs) >= -want else None


class _LogHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"   # the body ends when the connection closes
    store: LogStore

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        url = urllib.parse.urlparse(self.path)
        parts = url.path.strip("/").split("/")
        query = urllib.parse.parse_qs(url.query)
        if len(parts) != 4 or parts[0] != "containerLogs":
            self.send_error(404)
            return
        flag = lambda k: query.get(k, ["false"])[0] == "true"  # noqa: E731
        log = self.store.get(parts[1], parts[2], parts[3], flag("previous"))
        if log is None:
            self.send_error(400, "container not started")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self._stream(log, follow=flag("follow"), timestamps=flag("timestamps"))

    def _stream(self, log: _Log, *, follow: bool, timestamps: bool) -> None:
        sent = 0
        while True:
            with self.store.cond:
                while follow and sent >= len(log.lines) and not log.ended and not self.store.closing:
                    self.store.cond.wait(0.2)
                lines, done = log.lines[sent:], log.ended or self.store.closing or not follow
            sent += len(lines)
            out = "".join((ln if timestamps else ln.partition(" ")[2]) + "\n" for ln in lines)
            try:
                self.wfile.write(out.encode())
                self.wfile.flush()
            except OSError:
                return
            if done and sent >= len(log.lines):
                return


class LogEndpoint:
    """The kubelet's log endpoint, HTTPS on 127.0.0.1 (the apiserver proxies to it)."""

    def __init__(self, store: LogStore, pki: Path) -> None:
        handler = type("Handler", (_LogHandler,), {"store": store})
        self.store = store
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(pki / "server.crt"), str(pki / "server.key"))
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1},
                                        daemon=True)

    def start(self) -> LogEndpoint:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self.store.cond:
            self.store.closing = True
            self.store.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)


# -- controller, scheduler, kubelet ---------------------------------------------------------
class ClusterSim:
    """One thread, polling every 0.1 s, plays the controllers for one namespace."""

    def __init__(self, core: Any, custom: Any, namespace: str, logs: LogStore, kubelet_port: int,
                 apps: Any = None) -> None:
        self.core, self.custom, self.apps, self.ns = core, custom, apps, namespace
        self.logs = logs
        self.kubelet_port = kubelet_port
        self.machines: list[str] = []
        self.terminations: list[tuple[str, int | None]] = []   # (pod, grace asked for)
        self.created: list[str] = []
        self.container_lines: list[str] = ["I1122 10:00:00.000000 1 api.py:1] Starting worker group"]
        self.controller_enabled = True
        self._started: set[str] = set()   # pod uids the kubelet has started
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cluster-sim", daemon=True)
        self.error: BaseException | None = None

    # -- machines ------------------------------------------------------------------------
    def add_machine(self, name: str, *, capacity: str = "SPOT", taints: list[dict[str, str]] | None = None,
                    ready: bool = True) -> str:
        body = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "eks.amazonaws.com/capacityType": capacity}},
            "spec": {"taints": taints or []},
            "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                       "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kubelet_port}},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                       "reason": "KubeletReady", "message": "sim"}],
                       "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "20"},
                       "capacity": {"cpu": "8", "memory": "16Gi", "pods": "20"}},
        }
        self.core.create_node(body, _preload_content=False)
        self.machines.append(name)
        return name

    def set_ready(self, name: str, ready: bool) -> None:
        cond = {"type": "Ready", "status": "True" if ready else "False", "reason": "sim", "message": "sim"}
        self.core.patch_node_status(name, {"status": {"conditions": [cond]}}, _preload_content=False)

    def delete_machines(self) -> None:
        for name in self.machines:
            try:
                self.core.delete_node(name, _preload_content=False)
            except Exception:  # noqa: BLE001 - a test may have deleted it already
                pass

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> ClusterSim:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            while not self._stop.wait(0.1):
                if self.controller_enabled:
                    self._controller()
                pods = raw(self.core.list_namespaced_pod(self.ns, _preload_content=False))["items"]
                self._scheduler(pods)
                self._kubelet(pods)
        except BaseException as exc:
            self.error = exc

    # -- controller ----------------------------------------------------------------------
    def _controller(self) -> None:
        pods = raw(self.core.list_namespaced_pod(self.ns, _preload_content=False))["items"]
        names = {p["metadata"]["name"] for p in pods}
        owners: set[str] = set()
        for group, version, plural, kind in JOB_KINDS:
            try:
                jobs = raw(self.custom.list_namespaced_custom_object(group, version, self.ns, plural,
                                                                     _preload_content=False))["items"]
            except Exception as exc:  # noqa: BLE001 - CRD not installed in this test
                if getattr(exc, "status", None) == 404:
                    continue
                raise
            for job in jobs:
                owners.add(job["metadata"]["uid"])
                if job["metadata"].get("deletionTimestamp"):
                    continue
                specs = job["spec"].get("replicaSpecs") or job["spec"].get("pytorchReplicaSpecs")
                worker = specs["Worker"]
                replicas = int(worker.get("replicas", 1))
                for i in range(replicas):
                    name = f"{job['metadata']['name']}-worker-{i}"
                    if name not in names:
                        self._create_pod(job, kind, worker["template"], name, i)
                self._scale_down(pods, job, replicas)
        if self.apps is not None:
            owners |= self._statefulsets(pods, names)
        self._garbage_collect(pods, owners)

    def _statefulsets(self, pods: list[dict[str, Any]], names: set[str]) -> set[str]:
        """kube-controller-manager's StatefulSet controller, Parallel policy: pods ``<set>-<i>``."""
        owners = set()
        for sts in raw(self.apps.list_namespaced_stateful_set(self.ns, _preload_content=False))["items"]:
            owners.add(sts["metadata"]["uid"])
            if sts["metadata"].get("deletionTimestamp"):
                continue
            replicas = int(sts["spec"].get("replicas", 1))
            for i in range(replicas):
                name = f"{sts['metadata']['name']}-{i}"
                if name not in names:
                    self._create_pod(sts, "StatefulSet", sts["spec"]["template"], name, i)
            self._scale_down(pods, sts, replicas)
        return owners

    def _scale_down(self, pods: list[dict[str, Any]], job: dict[str, Any], replicas: int) -> None:
        """Both controllers delete the replicas whose index is no longer wanted."""
        for pod in pods:
            meta = pod["metadata"]
            owned = any(r["uid"] == job["metadata"]["uid"] for r in meta.get("ownerReferences") or [])
            index = int((meta.get("labels") or {}).get("replica-index", -1))
            if owned and index >= replicas and not meta.get("deletionTimestamp"):
                self._delete(meta["name"])

    def _delete(self, name: str) -> None:
        try:
            self.core.delete_namespaced_pod(name, self.ns, _preload_content=False)
        except Exception as exc:  # noqa: BLE001 - already gone
            if getattr(exc, "status", None) != 404:
                raise

    def _garbage_collect(self, pods: list[dict[str, Any]], owners: set[str]) -> None:
        """The garbage collector's part: pods whose owning job is gone are deleted."""
        for pod in pods:
            refs = pod["metadata"].get("ownerReferences") or []
            if refs and not pod["metadata"].get("deletionTimestamp") and not any(r["uid"] in owners for r in refs):
                self._delete(pod["metadata"]["name"])

    def _create_pod(self, job: dict[str, Any], kind: str, template: dict[str, Any], name: str, i: int) -> None:
        spec = copy.deepcopy(template["spec"])
        meta = job["metadata"]
        for c in spec["containers"]:
            if kind == "StatefulSet":  # the template as it is
                continue
            if kind == "ElasticJob":   # what the TorchElastic controller prepends
                s = job["spec"]
                c["args"] = [f"--rdzv_backend=etcd", f"--rdzv_endpoint={s['rdzvEndpoint']}",  # noqa: F541
                             f"--rdzv_id={meta['name']}", f"--nnodes={s['minReplicas']}:{s['maxReplicas']}",
                             *c.get("args", [])]
            else:                      # what the training operator sets from elasticPolicy
                p = job["spec"]["elasticPolicy"]
                c.setdefault("env", []).extend([
                    {"name": "PET_RDZV_BACKEND", "value": p["rdzvBackend"]},
                    {"name": "PET_RDZV_ENDPOINT", "value": f"{p['rdzvHost']}:{p['rdzvPort']}"},
                    {"name": "PET_NNODES", "value": f"{p['minReplicas']}:{p['maxReplicas']}"}])
        labels = {**(template.get("metadata") or {}).get("labels", {}), "job-name": meta["name"],
                  "replica-index": str(i)}
        owner = {"apiVersion": job.get("apiVersion", "apps/v1"), "kind": kind, "name": meta["name"], "uid": meta["uid"],
                 "controller": True}
        body = {"apiVersion": "v1", "kind": "Pod", "spec": spec,
                "metadata": {"name": name, "namespace": self.ns, "labels": labels, "ownerReferences": [owner]}}
        try:
            self.core.create_namespaced_pod(self.ns, body, _preload_content=False)
            self.created.append(name)
        except Exception as exc:  # noqa: BLE001 - the old incarnation is still terminating
            if getattr(exc, "status", None) != 409:
                raise

    # -- scheduler -----------------------------------------------------------------------
    def _scheduler(self, pods: list[dict[str, Any]]) -> None:
        unbound = [p for p in pods if not p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]
        if not unbound:
            return
        nodes = {n["metadata"]["name"]: n for n in raw(self.core.list_node(_preload_content=False))["items"]
                 if n["metadata"]["name"] in self.machines}
        for pod in unbound:
            for name, node in nodes.items():
                if self._fits(pod, node, pods):
                    target = {"apiVersion": "v1", "kind": "Node", "name": name}
                    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod["metadata"]["name"]},
                            "target": target}
                    self.core.create_namespaced_pod_binding(pod["metadata"]["name"], self.ns, body,
                                                            _preload_content=False)
                    pod["spec"]["nodeName"] = name
                    break

    @staticmethod
    def _fits(pod: dict[str, Any], node: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
        spec, name = node["spec"], node["metadata"]["name"]
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))
        if not ready or spec.get("unschedulable"):
            return False
        labels = node["metadata"].get("labels") or {}
        if any(labels.get(k) != v for k, v in (pod["spec"].get("nodeSelector") or {}).items()):
            return False
        tolerated = {t.get("key") for t in pod["spec"].get("tolerations") or []}
        if any(t.get("effect") == "NoSchedule" and t["key"] not in tolerated for t in spec.get("taints") or []):
            return False
        run = (pod["metadata"].get("labels") or {}).get("elastic-chaos/run-id")
        return not any(p["spec"].get("nodeName") == name and not p["metadata"].get("deletionTimestamp")
                       and (p["metadata"].get("labels") or {}).get("elastic-chaos/run-id") == run for p in pods)

    # -- kubelet -------------------------------------------------------------------------
    def _kubelet(self, pods: list[dict[str, Any]]) -> None:
        for pod in pods:
            meta, spec = pod["metadata"], pod["spec"]
            if spec.get("nodeName") not in self.machines:
                continue
            container = spec["containers"][0]["name"]
            if meta.get("deletionTimestamp"):
                self.logs.end(self.ns, meta["name"], container)
                self.terminations.append((meta["name"], meta.get("deletionGracePeriodSeconds")))
                self._finish_deletion(meta)
            elif meta["uid"] not in self._started:
                self._started.add(meta["uid"])
                self.logs.open(self.ns, meta["name"], container)
                self.logs.write(self.ns, meta["name"], container, *self.container_lines)
                self._set_running(meta["name"], container, restarts=0)

    def _finish_deletion(self, meta: dict[str, Any]) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                "preconditions": {"uid": meta["uid"]}}
        try:
            self.core.delete_namespaced_pod(meta["name"], self.ns, body=body, _preload_content=False)
        except Exception as exc:  # noqa: BLE001 - already gone
            if getattr(exc, "status", None) not in (404, 409):
                raise

    def _set_running(self, pod: str, container: str, *, restarts: int, last_exit: int | None = None) -> None:
        now = rfc3339nano(time.time()).split(".")[0].rstrip("Z") + "Z"
        status: dict[str, Any] = {"name": container, "ready": True, "restartCount": restarts,
                                  "image": "sim", "imageID": "sim", "containerID": f"sim://{pod}-{restarts}",
                                  "state": {"running": {"startedAt": now}}}
        if last_exit is not None:
            status["lastState"] = {"terminated": {"exitCode": last_exit, "reason": "Error",
                                                  "startedAt": now, "finishedAt": now}}
        body = {"status": {"phase": "Running", "containerStatuses": [status],
                           "conditions": [{"type": "Ready", "status": "True"}]}}
        try:
            self.core.patch_namespaced_pod_status(pod, self.ns, body, _preload_content=False)
        except Exception as exc:  # noqa: BLE001 - deleted since this loop listed it (a test's grace-0 delete)
            if getattr(exc, "status", None) != 404:
                raise

    # -- what tests do to containers -------------------------------------------------------
    def restart_container(self, pod: str, container: str, *, exit_code: int = 1, after: list[str] = ()) -> None:  # type: ignore[assignment]
        """The container died and the kubelet started it again in the same pod."""
        current = raw(self.core.read_namespaced_pod(pod, self.ns, _preload_content=False))
        restarts = int(current["status"]["containerStatuses"][0]["restartCount"]) + 1
        self.logs.open(self.ns, pod, container)
        if after:
            self.logs.write(self.ns, pod, container, *after)
        self._set_running(pod, container, restarts=restarts, last_exit=exit_code)

    def finish_container(self, pod: str, container: str, *, exit_code: int) -> None:
        """The container exited for good (restartPolicy Never): the pod is Succeeded/Failed."""
        self.logs.end(self.ns, pod, container)
        now = rfc3339nano().split(".")[0].rstrip("Z") + "Z"
        st = {"name": container, "ready": False, "restartCount": 0, "image": "sim", "imageID": "sim",
              "state": {"terminated": {"exitCode": exit_code, "startedAt": now, "finishedAt": now}}}
        phase = "Succeeded" if exit_code == 0 else "Failed"
        self.core.patch_namespaced_pod_status(pod, self.ns, {"status": {"phase": phase, "containerStatuses": [st]}},
                                              _preload_content=False)
