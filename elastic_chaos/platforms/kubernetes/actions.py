"""The destructive Kubernetes calls behind the faults, each failing loudly.

delete pod (grace 0 or graceful), evict (policy/v1, policy/v1beta1 on servers
older than 1.22), cordon / uncordon, drain (cordon, then evict every pod that
is not a DaemonSet's or a mirror pod, waiting until they are gone), delete
node. A refused call is never a success: 403 (RBAC), 404 (the target is gone),
409 (it changed since the plan: a pod deletion carries the planned uid as a
precondition) and 429 (a PodDisruptionBudget blocks an eviction) each raise
InjectionFailed saying what happened and what to do.

Clients are injected (a CoreV1Api, optionally a PolicyV1Api for discovery);
bodies and answers are raw JSON, so any client version from 29 on works.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from elastic_chaos.errors import InjectionFailed
from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.platforms.kubernetes.watch import K8sObject, api_message, api_status, read_json
from elastic_chaos.waiting import eventually

HINTS = {
    401: "the credentials were rejected: check the kubeconfig/token",
    403: "the credentials in use are not allowed to; grant the verb with a Role/ClusterRole "
         "(see docs/KUBERNETES.md, 'RBAC the toolkit needs') or use another kubeconfig",
    404: "it is already gone (or never existed)",
    409: "it changed since the fault was planned (replaced or already being deleted); plan again",
    429: "a PodDisruptionBudget does not allow this disruption right now",
}


@contextmanager
def refused_loudly(what: str) -> Iterator[None]:
    """Turn an API error into InjectionFailed that says what was refused and why."""
    try:
        yield
    except Exception as exc:
        status = api_status(exc)
        if status is None:
            raise
        hint = HINTS.get(status, "the API server refused it")
        raise InjectionFailed(f"{what} failed: HTTP {status} {api_message(exc)} -- {hint}") from exc


class ClusterActions:
    """Pod and node operations in one namespace; every method blocks only as documented."""

    def __init__(self, core_v1: Any, namespace: str, *, policy_v1: Any = None) -> None:
        self.core = core_v1
        self.policy = policy_v1
        self.namespace = namespace
        self._eviction_version: str | None = None

    # -- pods ---------------------------------------------------------------------
    def get_pod(self, name: str) -> K8sObject | None:
        """The pod, or None if there is none by that name."""
        try:
            pod: K8sObject = read_json(self.core.read_namespaced_pod(name, self.namespace, _preload_content=False))
            return pod
        except Exception as exc:
            if api_status(exc) == 404:
                return None
            with refused_loudly(f"reading pod {self.namespace}/{name}"):
                raise

    def delete_pod(self, name: str, *, grace_s: int, uid: str | None = None) -> None:
        """Delete a pod: grace 0 removes it at once (the kubelet kills the containers),
        otherwise the kubelet sends SIGTERM and SIGKILLs after ``grace_s``. With ``uid``,
        only that incarnation (409 if it was replaced). Returns once the API accepted it."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": grace_s}
        if uid:
            body["preconditions"] = {"uid": uid}
        with refused_loudly(f"deleting pod {self.namespace}/{name} (grace {grace_s}s)"):
            self.core.delete_namespaced_pod(name, self.namespace, body=body, _preload_content=False)

    def evict_pod(self, name: str, *, grace_s: int | None = None) -> str:
        """Ask for an eviction (honours PodDisruptionBudgets); returns the policy API
        version used. Falls back to policy/v1beta1 on servers without policy/v1."""
        version = self.eviction_version()
        try:
            self._post_eviction(name, version, grace_s)
        except Exception as exc:
            if version == "policy/v1" and api_status(exc) in (400, 404) and "policy/v1" in api_message(exc):
                self._eviction_version = version = "policy/v1beta1"
                with refused_loudly(f"evicting pod {self.namespace}/{name}"):
                    self._post_eviction(name, version, grace_s)
                return version
            with refused_loudly(f"evicting pod {self.namespace}/{name}"):
                raise
        return version

    def _post_eviction(self, name: str, version: str, grace_s: int | None) -> None:
        body: dict[str, Any] = {"apiVersion": version, "kind": "Eviction",
                                "metadata": {"name": name, "namespace": self.namespace}}
        if grace_s is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace_s}
        self.core.create_namespaced_pod_eviction(name, self.namespace, body, _preload_content=False)

    def eviction_version(self) -> str:
        """policy/v1 where the server has it (1.22+), else policy/v1beta1 (asked once)."""
        if self._eviction_version is None:
            self._eviction_version = "policy/v1"
            if self.policy is not None:
                try:
                    self.policy.get_api_resources(_preload_content=False)
                except Exception as exc:
                    if api_status(exc) != 404:
                        raise
                    self._eviction_version = "policy/v1beta1"
        return self._eviction_version

    def wait_pod_gone(self, name: str, uid: str | None, timeout_s: float) -> bool:
        """Block until the pod (that uid, if given) no longer exists; False on timeout."""
        def gone() -> bool:
            pod = self.get_pod(name)
            return pod is None or bool(uid and pod["metadata"].get("uid") != uid)

        return eventually(gone, timeout_s=timeout_s, interval_s=0.2)

    # -- nodes ----------------------------------------------------------------------
    def set_unschedulable(self, node: str, value: bool) -> None:
        verb = "cordoning" if value else "uncordoning"
        with refused_loudly(f"{verb} node {node}"):
            self.core.patch_node(node, {"spec": {"unschedulable": value}}, _preload_content=False)

    def delete_node(self, node: str) -> None:
        with refused_loudly(f"deleting node {node}"):
            self.core.delete_node(node, _preload_content=False)

    def pods_on(self, node: str, *, all_namespaces: bool = True) -> list[K8sObject]:
        """Every pod bound to ``node`` (what a drain has to move)."""
        selector = f"spec.nodeName={node}"
        with refused_loudly(f"listing the pods on node {node}"):
            if all_namespaces:
                resp = self.core.list_pod_for_all_namespaces(field_selector=selector, _preload_content=False)
            else:
                resp = self.core.list_namespaced_pod(self.namespace, field_selector=selector,
                                                     _preload_content=False)
        items: list[K8sObject] = read_json(resp).get("items") or []
        return items

    def drain(self, node: str, *, grace_s: int | None, timeout_s: float,
              on_evicted: Callable[[K8sObject], None] | None = None) -> list[str]:
        """kubectl drain: cordon, evict every evictable pod (retrying while a PDB says
        429), wait until they are gone. Returns ``namespace/name`` of what was evicted.
        Raises InjectionFailed when the deadline passes with pods still there."""
        self.set_unschedulable(node, True)
        deadline = time.monotonic() + timeout_s
        evicted: list[str] = []
        pending = [p for p in self.pods_on(node) if _evictable(p)]
        while pending:
            pod = pending.pop(0)
            meta = pod["metadata"]
            try:
                ClusterActions(self.core, meta["namespace"], policy_v1=self.policy).evict_pod(
                    meta["name"], grace_s=grace_s)
            except InjectionFailed as exc:
                if "HTTP 404" in str(exc):
                    continue       # gone by itself: nothing to move
                if "HTTP 429" not in str(exc) or time.monotonic() > deadline:
                    raise
                pending.append(pod)
                time.sleep(1.0)
                continue
            evicted.append(f"{meta['namespace']}/{meta['name']}")
            if on_evicted is not None:
                on_evicted(pod)
        left = self._wait_evicted(node, evicted, deadline)
        if left:
            raise InjectionFailed(f"draining node {node}: pods still there after {timeout_s:.0f}s: "
                                  f"{', '.join(left)} (their grace period may be longer; raise the timeout)")
        return evicted

    def _wait_evicted(self, node: str, evicted: list[str], deadline: float) -> list[str]:
        """The evicted pods still on ``node`` when all are gone or ``deadline`` passed."""
        left = list(evicted)

        def all_gone() -> bool:
            there = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in self.pods_on(node)
                     if _evictable(p)}
            left[:] = [name for name in evicted if name in there]
            return not left

        eventually(all_gone, timeout_s=max(0.0, deadline - time.monotonic()), interval_s=0.3)
        return left


def _evictable(pod: K8sObject) -> bool:
    """kubectl drain's rule: DaemonSet pods and mirror (static) pods stay."""
    meta = pod.get("metadata") or {}
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return False
    if any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or []):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def create_error(doc: m.Manifest, exc: BaseException, settings: m.KubeSettings) -> str:
    """Why creating one of the run's objects failed, and what to do about it."""
    status, what = api_status(exc), f"creating {doc['kind']} {settings.namespace}/{doc['metadata']['name']}"
    if status is None:
        return f"{what}: {exc}"
    if status == 404 and doc["kind"] in ("ElasticJob", "PyTorchJob"):
        jk = settings.job_kind
        return (f"{what}: the cluster does not serve {jk.plural}.{jk.api_version.split('/')[0]} "
                f"(HTTP 404 {api_message(exc)}). Install the CRD and its controller: `make kind-up` on kind, "
                "or kubectl apply -f kind/manifests/crds/ and the controller (docs/KUBERNETES.md).")
    if status == 409:
        return (f"{what}: it already exists (HTTP 409): a run with this id was not cleaned up; delete it with "
                f"kubectl delete -n {settings.namespace} {doc['kind'].lower()},deploy,svc,pvc,pod "
                f"-l {m.RUN_LABEL}={doc['metadata']['labels'][m.RUN_LABEL]}")
    if status == 403:
        return f"{what}: forbidden (HTTP 403 {api_message(exc)}); see docs/KUBERNETES.md for the RBAC the toolkit needs"
    return f"{what}: HTTP {status} {api_message(exc)}"


DELETE_IN_BACKGROUND = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}


def delete_object(core: Any, apps: Any, custom: Any, namespace: str, kind: str, name: str) -> None:
    """Delete one object a run made (its dependents in the background), by its kind: what a run's
    teardown and ``elastic-chaos reap --kubeconfig`` remove. Raw responses: the client's models
    fail on some servers' delete replies (a Service's status read back as 'Success')."""
    body = DELETE_IN_BACKGROUND
    if kind == "PersistentVolumeClaim":
        core.delete_namespaced_persistent_volume_claim(name, namespace, body=body, _preload_content=False)
    elif kind == "Service":
        core.delete_namespaced_service(name, namespace, body=body, _preload_content=False)
    elif kind == "Deployment":
        apps.delete_namespaced_deployment(name, namespace, body=body, _preload_content=False)
    elif kind == "StatefulSet":
        apps.delete_namespaced_stateful_set(name, namespace, body=body, _preload_content=False)
    else:
        jk = next(j for j in m.JobKind if j.kind == kind)
        group, version = jk.api_version.split("/")
        custom.delete_namespaced_custom_object(group, version, namespace, jk.plural, name, body=body,
                                               _preload_content=False)
