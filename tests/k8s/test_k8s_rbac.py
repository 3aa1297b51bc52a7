"""kind/manifests/rbac.yaml is enough: a user bound to exactly those roles runs a job and
injects every Kubernetes fault (the least privilege docs/KUBERNETES.md documents)."""
from __future__ import annotations

import pytest
from crd_util import CRD_DIR
from k8s_testenv import api_client, load_yaml

from elastic_chaos.events import FaultEv
from elastic_chaos.faults.kubernetes import CordonNode, DeleteNode, DeletePod, DeletePodGraceful, DrainNode, EvictPod
from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.spec import JobSpec

pytestmark = pytest.mark.k8s_api

RBAC = CRD_DIR.parent / "rbac.yaml"


@pytest.fixture
def runner_rights(admin, namespace):
    from kubernetes import client
    rbac = client.RbacAuthorizationV1Api(admin)
    roles = load_yaml(RBAC)
    for role in roles:
        try:
            rbac.create_cluster_role(role, _preload_content=False)
        except Exception as exc:
            if getattr(exc, "status", None) != 409:
                raise
    subject = [{"kind": "User", "name": "runner", "apiGroup": "rbac.authorization.k8s.io"}]
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole"}
    rbac.create_namespaced_role_binding(namespace, {"metadata": {"name": "runner"}, "subjects": subject,
                                                    "roleRef": {**ref, "name": "elastic-chaos-runner"}},
                                        _preload_content=False)
    binding = f"{namespace}-runner-nodes"
    rbac.create_cluster_role_binding({"metadata": {"name": binding}, "subjects": subject,
                                      "roleRef": {**ref, "name": "elastic-chaos-nodes"}}, _preload_content=False)
    yield
    rbac.delete_cluster_role_binding(binding, _preload_content=False)


def test_the_documented_roles_run_a_job_and_every_fault(k8s_api, runner_rights, make_platform, sim):
    platform = make_platform(api=api_client(k8s_api, "runner"))
    job = JobSpec(nodes="1:2")
    platform.start(job)
    victim = m.worker_pod_name(job.run_id, 1)

    for fault in (DeletePod(), DeletePodGraceful(grace_s=3), EvictPod()):
        fault.inject(platform, platform.timeline)
        sim_wait_running(platform, victim)
    cordon = CordonNode()
    cordon.revert(platform, platform.timeline, cordon.inject(platform, platform.timeline))
    drain = DrainNode(timeout_s=20)
    drain.revert(platform, platform.timeline, drain.inject(platform, platform.timeline))
    sim_wait_running(platform, victim)
    DeleteNode().inject(platform, platform.timeline)

    injected = [e.data.fault for e in platform.timeline.select(FaultEv.INJECTED)]
    assert injected == ["delete-pod", "delete-pod-graceful", "evict-pod", "cordon-node", "drain-node",
                        "delete-node"]
    platform.stop()                                           # and it may clean up after itself


def sim_wait_running(platform, pod: str) -> None:
    from k8s_testenv import until

    from elastic_chaos.platforms.api import NodeState
    until(f"{pod} running again", lambda: platform.pods.get(pod).state is NodeState.RUNNING, timeout_s=20)
