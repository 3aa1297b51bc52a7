"""`elastic-chaos reap --kubeconfig`: what a killed Kubernetes runner left, removed only when ours
and its runner is gone (against a real API server; the controller, scheduler and kubelet are
tests/k8s/k8s_sim.py's).

A soak's pytest SIGKILLed mid-scenario left a job's pods training on a cluster: nothing else would
ever remove them. A runner killed here is a started-and-killed process whose host/PID/start time
the run's objects are re-annotated with (this test's own process stays the live runner).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from k8s_testenv import until

from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.platforms.kubernetes.orphans import RUNNER_ANNOTATION, runner_stamp
from elastic_chaos.spec import JobSpec, RdzvBackend, RendezvousSpec

pytestmark = pytest.mark.k8s_api
ROOT = Path(__file__).resolve().parents[2]
MANAGED_LABEL = "app.kubernetes.io/managed-by"


def dead_stamp() -> str:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stamp = runner_stamp(proc.pid)
    proc.kill()
    proc.wait(10)
    return stamp


def ours(core: Any, apps: Any, custom: Any, namespace: str, run_id: str) -> list[tuple[str, str, str | None]]:
    """(kind, name, runner annotation) of every object labelled as run ``run_id``'s, pods too."""
    selector = m.run_selector(run_id)
    found = []
    for kind, items in (("Service", core.list_namespaced_service(namespace, label_selector=selector).items),
                        ("Deployment", apps.list_namespaced_deployment(namespace, label_selector=selector).items),
                        ("Pod", core.list_namespaced_pod(namespace, label_selector=selector).items)):
        found += [(kind, i.metadata.name, (i.metadata.annotations or {}).get(RUNNER_ANNOTATION)) for i in items]
    jobs = custom.list_namespaced_custom_object("elastic.pytorch.org", "v1alpha1", namespace, "elasticjobs",
                                                label_selector=selector)["items"]
    found += [("ElasticJob", j["metadata"]["name"], (j["metadata"].get("annotations") or {}).get(RUNNER_ANNOTATION))
              for j in jobs]
    return found


def stamp_all(core: Any, apps: Any, custom: Any, namespace: str, run_id: str, stamp: str) -> None:
    patch = {"metadata": {"annotations": {RUNNER_ANNOTATION: stamp}}}
    for kind, name, _ in ours(core, apps, custom, namespace, run_id):
        if kind == "Service":
            core.patch_namespaced_service(name, namespace, patch)
        elif kind == "Deployment":
            apps.patch_namespaced_deployment(name, namespace, patch)
        elif kind == "ElasticJob":
            custom.patch_namespaced_custom_object("elastic.pytorch.org", "v1alpha1", namespace, "elasticjobs",
                                                  name, patch)


def reap(k8s_api: Any, namespace: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "reap", "--kubeconfig",
                           str(k8s_api.kubeconfig()), "--namespace", namespace, *extra],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def lookalike(core: Any, namespace: str, name: str, labels: dict[str, str], stamp: str | None = None) -> None:
    meta = {"name": name, "labels": labels, **({"annotations": {RUNNER_ANNOTATION: stamp}} if stamp else {})}
    core.create_namespaced_service(namespace, {
        "apiVersion": "v1", "kind": "Service", "metadata": meta,
        "spec": {"ports": [{"port": 80}], "selector": {"app": "x"}}})


def test_a_killed_runners_job_is_removed_and_nothing_else(make_platform, k8s_api, core, custom, namespace):
    from kubernetes import client
    apps = client.AppsV1Api(core.api_client)
    platform = make_platform()
    job = JobSpec(nodes="1:2", rdzv=RendezvousSpec(backend=RdzvBackend.ETCD_V2))
    platform.start(job)
    made = ours(core, apps, custom, namespace, job.run_id)
    assert {k for k, _, _ in made} >= {"ElasticJob", "Service"}
    assert {s for k, _, s in made if k != "Pod"} == {runner_stamp()}     # every object says who made it

    alive = reap(k8s_api, namespace)                                      # its runner (this process) lives
    assert alive.returncode == 0 and f"left run {job.run_id} (its runner (PID" in alive.stdout
    assert ours(core, apps, custom, namespace, job.run_id) != []

    # not ours: the run's label without the managed-by label, and a managed one of another host's run
    lookalike(core, namespace, f"{job.run_id}-lookalike", {m.RUN_LABEL: job.run_id})
    lookalike(core, namespace, "chaos-far-etcd", {MANAGED_LABEL: "elastic-chaos", m.RUN_LABEL: "chaos-far"},
              stamp="elsewhere/42/4242")
    stamp_all(core, apps, custom, namespace, job.run_id, dead_stamp())   # now its runner was killed

    dry = reap(k8s_api, namespace, "--dry-run")
    assert dry.returncode == 0 and f"would remove run {job.run_id}" in dry.stdout
    assert "left run chaos-far (its runner ran on host elsewhere" in dry.stdout and "--run-id chaos-far" in dry.stdout

    done = reap(k8s_api, namespace)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"removed run {job.run_id} (its runner (PID" in done.stdout
    until("the run's objects and pods gone", lambda: [o for o in ours(core, apps, custom, namespace, job.run_id)
                                                     if o[1] != f"{job.run_id}-lookalike"] == [])
    names = {s.metadata.name for s in core.list_namespaced_service(namespace).items}
    assert {f"{job.run_id}-lookalike", "chaos-far-etcd"} <= names          # nothing without our stamp of death

    named = reap(k8s_api, namespace, "--run-id", "chaos-far")             # the user names the far run
    assert named.returncode == 0 and "removed run chaos-far (its runner ran on host elsewhere" in named.stdout
    names = {s.metadata.name for s in core.list_namespaced_service(namespace).items}
    assert "chaos-far-etcd" not in names and f"{job.run_id}-lookalike" in names


def test_a_bad_kubeconfig_or_run_id_is_a_usage_error(tmp_path):
    for extra in (["--kubeconfig", str(tmp_path / "none")], ["--run-id", "../etc"]):
        out = subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "reap", *extra], capture_output=True,
                             text=True, timeout=60, cwd=ROOT)
        assert out.returncode == 2 and "Traceback" not in out.stderr and out.stderr.strip(), out.stderr
