"""``elastic-chaos manifest`` prints YAML the real API server accepts (server-side dry run)."""
from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

pytestmark = pytest.mark.k8s_api


def create(admin, namespace: str, doc: dict) -> None:
    from kubernetes import client
    kind, dry = doc["kind"], {"dry_run": "All", "_preload_content": False}
    if kind == "PersistentVolumeClaim":
        client.CoreV1Api(admin).create_namespaced_persistent_volume_claim(namespace, doc, **dry)
    elif kind == "Service":
        client.CoreV1Api(admin).create_namespaced_service(namespace, doc, **dry)
    elif kind == "Deployment":
        client.AppsV1Api(admin).create_namespaced_deployment(namespace, doc, **dry)
    else:
        group, version = doc["apiVersion"].split("/")
        plural = {"ElasticJob": "elasticjobs", "PyTorchJob": "pytorchjobs"}[kind]
        client.CustomObjectsApi(admin).create_namespaced_custom_object(group, version, namespace, plural, doc,
                                                                       **dry)


@pytest.mark.parametrize("args", [
    ["--platform", "kind", "--job-kind", "elasticjob"],
    ["--platform", "kubernetes", "--job-kind", "pytorchjob", "--rdzv-backend", "c10d"],
    ["--platform", "kubernetes", "--job-kind", "pytorchjob", "--preset", "eks-gpu", "--image", "reg/train:1",
     "--gpus-per-node", "8", "--nproc-per-node", "8", "--efa-per-node", "4", "--nodes", "2:8"],
    ["--platform", "kubernetes", "--job-kind", "elasticjob", "--toleration", "spot=true:NoSchedule",
     "--node-selector", "pool=spot", "--existing-claim", "efs-claim", "--cpu", "4", "--memory", "8Gi"],
], ids=["kind-elasticjob", "pytorchjob-c10d", "eks-gpu-pytorchjob", "elasticjob-flags"])
def test_the_printed_yaml_is_accepted_by_the_api_server(admin, namespace, crds_installed, args):
    out = subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "manifest", *args, "--namespace", namespace],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    kinds = [d["kind"] for d in docs]
    assert kinds[-1] in ("ElasticJob", "PyTorchJob")
    for doc in docs:
        create(admin, namespace, doc)          # raises on anything the server would refuse
