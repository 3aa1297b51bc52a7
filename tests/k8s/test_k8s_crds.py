"""The CRDs kind/ ships install on a real API server, and both job kinds round-trip."""
from __future__ import annotations

import json

import pytest
from crd_util import CRD_DIR, established

from elastic_chaos.platforms.kubernetes import jobs
from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.spec import JobSpec, RdzvBackend, RendezvousSpec

pytestmark = pytest.mark.k8s_api


def test_the_shipped_crds_install_and_are_established(admin, crds_installed):
    from kubernetes import client
    ext = client.ApiextensionsV1Api(admin)
    assert set(crds_installed) == {"elasticjobs.elastic.pytorch.org", "pytorchjobs.kubeflow.org"}
    assert len(list(CRD_DIR.glob("*.yaml"))) == 2
    for name in crds_installed:
        assert established(ext, name)


@pytest.mark.parametrize("kind", [k for k in m.JobKind if k.needs_operator])
@pytest.mark.parametrize("backend", list(RdzvBackend))
def test_each_job_kind_is_accepted_and_round_trips(custom, namespace, crds_installed, kind, backend):
    job = JobSpec(nodes="1:3", nproc_per_node=2, max_restarts=5,
                  rdzv=RendezvousSpec(backend=backend, last_call_timeout=5, keep_alive_interval=2))
    settings = m.KubeSettings(namespace=namespace, job_kind=kind)
    body = m.job_manifest(job, settings)
    group, version = kind.api_version.split("/")

    custom.create_namespaced_custom_object(group, version, namespace, kind.plural, body, _preload_content=False)
    back = json.loads(custom.get_namespaced_custom_object(group, version, namespace, kind.plural, job.run_id,
                                                          _preload_content=False).data)

    assert back["kind"] == kind.kind and back["apiVersion"] == kind.api_version
    assert back["spec"] == body["spec"]        # nothing pruned, nothing defaulted away
    assert back["metadata"]["labels"][m.RUN_LABEL] == job.run_id


@pytest.mark.parametrize("kind,bad,field", [
    (m.JobKind.ELASTICJOB, {"minReplicas": 0}, "minReplicas"),
    (m.JobKind.ELASTICJOB, {"rdzvEndpoint": None}, "rdzvEndpoint"),
    (m.JobKind.PYTORCHJOB, {"elasticPolicy": {"rdzvBackend": "zookeeper"}}, "rdzvBackend"),
])
def test_the_crd_schema_rejects_a_malformed_job(custom, namespace, crds_installed, kind, bad, field):
    body = m.job_manifest(JobSpec(), m.KubeSettings(namespace=namespace, job_kind=kind))
    for key, value in bad.items():
        if value is None:
            del body["spec"][key]
        elif isinstance(value, dict):
            body["spec"][key].update(value)
        else:
            body["spec"][key] = value
    group, version = kind.api_version.split("/")
    with pytest.raises(Exception) as err:
        custom.create_namespaced_custom_object(group, version, namespace, kind.plural, body,
                                               _preload_content=False)
    assert getattr(err.value, "status", None) == 422
    assert field in str(err.value)


def test_the_rendered_etcd_and_claim_are_accepted_by_the_api_server(admin, namespace):
    from kubernetes import client
    job = JobSpec()
    docs = jobs.render(job, m.KubeSettings(namespace=namespace))
    core, apps = client.CoreV1Api(admin), client.AppsV1Api(admin)
    for doc in docs:
        if doc["kind"] == "PersistentVolumeClaim":
            core.create_namespaced_persistent_volume_claim(namespace, doc, _preload_content=False)
        elif doc["kind"] == "Service":
            core.create_namespaced_service(namespace, doc, _preload_content=False)
        elif doc["kind"] == "Deployment":
            apps.create_namespaced_deployment(namespace, doc, _preload_content=False)
    dep = json.loads(apps.read_namespaced_deployment(m.etcd_name(job.run_id), namespace,
                                                     _preload_content=False).data)
    assert "--enable-v2=true" in dep["spec"]["template"]["spec"]["containers"][0]["command"]
    assert [d["kind"] for d in docs][:3] == ["PersistentVolumeClaim", "Deployment", "Service"]


@pytest.mark.parametrize("dns", [True, False])
def test_the_statefulset_kind_is_accepted_as_rendered(admin, namespace, dns):
    from kubernetes import client
    job = JobSpec(nodes="1:3", rdzv=RendezvousSpec(last_call_timeout=3))
    settings = m.KubeSettings(namespace=namespace, dns=dns, etcd_shell=not dns)
    apps = client.AppsV1Api(admin)
    for doc in jobs.render(job, settings, etcd_address=None if dns else "10.88.1.2"):
        if doc["kind"] in ("Deployment", "StatefulSet"):
            create = apps.create_namespaced_deployment if doc["kind"] == "Deployment" \
                else apps.create_namespaced_stateful_set
            create(namespace, doc, _preload_content=False)
    sts = json.loads(apps.read_namespaced_stateful_set(f"{job.run_id}-worker", namespace,
                                                       _preload_content=False).data)
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert sts["spec"]["podManagementPolicy"] == "Parallel" and sts["spec"]["replicas"] == 3
    assert container["command"][:2] == ["/bin/sh", "-c"] and "--local-addr=$(POD_IP)" in container["args"]
    etcd = f"--rdzv-endpoint={job.run_id}-etcd:2379" if dns else "--rdzv-endpoint=10.88.1.2:2379"
    assert etcd in container["args"]
