"""What a killed runner left on a cluster: found by our labels and the runner's stamp, removed only
when that runner is known to be gone (or the user names the run).

Every object a Kubernetes run creates carries ``app.kubernetes.io/managed-by=elastic-chaos`` and
its run id (``elastic-chaos/run-id``), and the annotation ``elastic-chaos/runner`` =
``HOST/PID/START`` (the runner's host name, PID and start time in clock ticks since boot: with the
PID, an identity no later process shares). A runner that ends tears its objects down; one that was
SIGKILLed (a CI job cancelled hard, the OOM killer, a soak's pytest killed) cannot, and its pods
train on. ``elastic-chaos reap --kubeconfig`` finds such runs: one whose runner ran on this host
and is gone is removed; one whose runner is alive is left alone; one whose runner ran on another
host, or that carries no stamp (made by an older version), is listed with how to remove it
(``--run-id``), never removed by a guess.
"""
from __future__ import annotations

import enum
import os
import socket
from dataclasses import dataclass, field
from typing import Any

from elastic_chaos.host import procs
from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.platforms.kubernetes.actions import delete_object
from elastic_chaos.platforms.kubernetes.settings import JobKind
from elastic_chaos.platforms.kubernetes.watch import K8sObject, read_json

RUNNER_ANNOTATION = "elastic-chaos/runner"
MANAGED = "app.kubernetes.io/managed-by=elastic-chaos"


def runner_stamp(pid: int | None = None) -> str:
    """``HOST/PID/START`` of this process (or ``pid``): what a run's objects are annotated with."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}/{pid}/{procs.start_time(pid) or 0}"


class Runner(enum.Enum):
    """What is known of the runner that made a run's objects."""

    ALIVE = "alive"
    GONE = "gone"
    ELSEWHERE = "on another host"
    UNKNOWN = "unknown"


@dataclass
class ClusterRun:
    """One run's objects on the cluster (by its run-id label)."""

    run_id: str
    objects: list[tuple[str, str]] = field(default_factory=list)
    """(kind, name) of each object the toolkit made for the run."""
    stamp: str | None = None

    def runner(self) -> tuple[Runner, str]:
        """What is known of the run's runner, and in words."""
        if not self.stamp:
            return Runner.UNKNOWN, "its objects carry no runner stamp (made by an older version)"
        host, _, rest = self.stamp.partition("/")
        pid_s, _, start_s = rest.partition("/")
        if not (pid_s.isdigit() and start_s.isdigit()):
            return Runner.UNKNOWN, f"its runner stamp {self.stamp!r} is not HOST/PID/START"
        if host != socket.gethostname():
            return Runner.ELSEWHERE, f"its runner ran on host {host} (PID {pid_s}), not this one"
        if procs.is_running(int(pid_s), int(start_s)):
            return Runner.ALIVE, f"its runner (PID {pid_s}) is running"
        return Runner.GONE, f"its runner (PID {pid_s} on this host) is gone"

    def describe(self) -> str:
        return ", ".join(f"{kind} {name}" for kind, name in self.objects)


_CORE = (("PersistentVolumeClaim", "list_namespaced_persistent_volume_claim"),
         ("Service", "list_namespaced_service"))
_APPS = (("Deployment", "list_namespaced_deployment"), ("StatefulSet", "list_namespaced_stateful_set"))


def find_runs(core: Any, apps: Any, custom: Any, namespace: str) -> list[ClusterRun]:
    """Every run with objects in ``namespace``, by our labels (pods are not listed: their
    controller goes with the run, and the removal deletes any left by selector)."""
    runs: dict[str, ClusterRun] = {}

    def add(kind: str, item: K8sObject) -> None:
        meta = item.get("metadata") or {}
        run_id = (meta.get("labels") or {}).get(m.RUN_LABEL)
        if not run_id:
            return
        run = runs.setdefault(run_id, ClusterRun(run_id))
        run.objects.append((kind, str(meta.get("name"))))
        run.stamp = run.stamp or (meta.get("annotations") or {}).get(RUNNER_ANNOTATION)

    for api, kinds in ((core, _CORE), (apps, _APPS)):
        for kind, lister in kinds:
            for item in read_json(getattr(api, lister)(namespace, label_selector=MANAGED,
                                                       _preload_content=False))["items"]:
                add(kind, item)
    for jk in (JobKind.ELASTICJOB, JobKind.PYTORCHJOB):
        group, version = jk.api_version.split("/")
        try:
            listed = custom.list_namespaced_custom_object(group, version, namespace, jk.plural,
                                                          label_selector=MANAGED)
        except Exception as exc:  # noqa: BLE001 - its CRD is not installed (404) or not ours to read (403)
            if getattr(exc, "status", None) in (403, 404):
                continue
            raise
        for item in listed.get("items") or []:
            add(jk.kind, item)
    return sorted(runs.values(), key=lambda r: r.run_id)


def remove(core: Any, apps: Any, custom: Any, namespace: str, run: ClusterRun) -> list[str]:
    """Delete the run's objects and then its pods (at once: nothing of the run is watched any
    more); returns the errors (a 404 is not one: gone already)."""
    errors: list[str] = []
    for kind, name in run.objects:
        try:
            delete_object(core, apps, custom, namespace, kind, name)
        except Exception as exc:  # noqa: BLE001 - said, and the run is kept for the next try
            if getattr(exc, "status", None) != 404:
                errors.append(f"deleting {kind} {name}: {getattr(exc, 'reason', None) or exc}")
    try:
        core.delete_collection_namespaced_pod(namespace, label_selector=f"{MANAGED},{m.run_selector(run.run_id)}",
                                              grace_period_seconds=0, _preload_content=False)
    except Exception as exc:  # noqa: BLE001
        if getattr(exc, "status", None) not in (403, 404):
            errors.append(f"deleting the pods of {run.run_id}: {getattr(exc, 'reason', None) or exc}")
    return errors
