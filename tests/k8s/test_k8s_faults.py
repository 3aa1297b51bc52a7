"""Every Kubernetes fault does what it says on a real API server, and a refusal
(403 RBAC, 404 gone, 409 replaced) fails the injection loudly -- never "completed"."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from k8s_testenv import until

from elastic_chaos.errors import FaultUnavailable, InjectionFailed
from elastic_chaos.events import EventType, FaultEv, NodeEv, Source, first
from elastic_chaos.faults.kubernetes import (
    CordonNode,
    DeleteNode,
    DeletePod,
    DeletePodGraceful,
    DrainNode,
    EvictPod,
    StopKindNode,
)
from elastic_chaos.platforms.api import NodeState
from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.spec import JobSpec

pytestmark = pytest.mark.k8s_api


def started(platform) -> JobSpec:
    job = JobSpec(nodes="1:2")
    platform.start(job)
    return job


def read(core, kind: str, name: str, namespace: str | None = None) -> dict | None:
    try:
        if kind == "node":
            return json.loads(core.read_node(name, _preload_content=False).data)
        return json.loads(core.read_namespaced_pod(name, namespace, _preload_content=False).data)
    except Exception as exc:
        if getattr(exc, "status", None) == 404:
            return None
        raise


def fault_events(platform) -> list[EventType]:
    return [e.type for e in platform.timeline.select(Source.FAULT)]


def test_delete_pod_removes_the_pod_at_once_without_a_graceful_termination(make_platform, sim):
    platform = make_platform()
    job = started(platform)
    victim = m.worker_pod_name(job.run_id, 1)

    record = DeletePod().inject(platform, platform.timeline)

    assert record.target == victim and record.hit.action == "delete-pod-grace-0"
    assert record.hit.detail["gone"] is True and record.hit.detail["grace_s"] == 0
    assert (victim, 0) not in [(p, g) for p, g in sim.terminations if g]      # no SIGTERM phase at all
    assert fault_events(platform) == [FaultEv.PLANNED, FaultEv.INJECTED]


def test_graceful_delete_gives_the_kubelet_the_grace_period(make_platform, sim):
    platform = make_platform()
    job = started(platform)
    victim = m.worker_pod_name(job.run_id, 1)

    record = DeletePodGraceful(grace_s=7).inject(platform, platform.timeline)

    assert record.hit.action == "delete-pod-graceful" and record.hit.detail["gone"] is True
    assert (victim, 7) in sim.terminations                                    # the kubelet was asked for 7 s
    assert first(platform.timeline.events(), NodeEv.TERMINATING, node=victim,
                 where=lambda e: e.data.grace_s == 7) is not None


def test_evict_uses_policy_v1beta1_on_a_server_without_policy_v1_and_the_pod_is_replaced(make_platform, sim):
    platform = make_platform()
    job = started(platform)
    victim = m.worker_pod_name(job.run_id, 1)
    old_uid = platform.pods.get(victim).labels["uid"]

    plan = EvictPod().plan(platform)
    record = EvictPod().inject(platform, platform.timeline)

    assert "policy/v1beta1 Eviction" in plan.actions[0]                      # this is a 1.20 API server
    assert record.hit.detail["policy_version"] == "policy/v1beta1"
    until("the evicted pod to terminate", lambda: victim in [p for p, _ in sim.terminations])
    until("its replacement", lambda: platform.pods.get(victim).labels["uid"] != old_uid
          and platform.pods.get(victim).state is NodeState.RUNNING)


def test_cordon_marks_the_machine_unschedulable_and_revert_uncordons(make_platform, core):
    platform = make_platform()
    job = started(platform)
    machine = platform.machine_of(m.worker_pod_name(job.run_id, 1))
    fault = CordonNode()

    record = fault.inject(platform, platform.timeline)
    assert record.target == machine
    assert read(core, "node", machine)["spec"]["unschedulable"] is True
    assert all(n.state is NodeState.RUNNING for n in platform.nodes())     # nothing running was touched
    until("the cordon event", lambda: bool(platform.timeline.select(NodeEv.MACHINE_CORDONED)))

    fault.revert(platform, platform.timeline, record)
    assert not read(core, "node", machine)["spec"].get("unschedulable")
    assert fault_events(platform) == [FaultEv.PLANNED, FaultEv.INJECTED, FaultEv.REVERTED]


def test_drain_evicts_the_pod_and_its_replacement_lands_on_another_machine(make_platform, core, sim):
    platform = make_platform()
    job = started(platform)
    victim = m.worker_pod_name(job.run_id, 1)
    machine = platform.machine_of(victim)
    fault = DrainNode(timeout_s=20)

    record = fault.inject(platform, platform.timeline)

    assert record.target == victim and record.detail["machine"] == machine
    assert record.hit.detail["evicted"] == [f"{platform.settings.namespace}/{victim}"]
    assert read(core, "node", machine)["spec"]["unschedulable"] is True
    until("the replacement running elsewhere", lambda: platform.pods.get(victim).state is NodeState.RUNNING
          and platform.pods.get(victim).labels.get("machine") not in (None, machine))
    fault.revert(platform, platform.timeline, record)
    assert not read(core, "node", machine)["spec"].get("unschedulable")


def test_delete_node_removes_the_node_object(make_platform, core):
    platform = make_platform()
    job = started(platform)
    victim = m.worker_pod_name(job.run_id, 1)
    machine = platform.machine_of(victim)

    record = DeleteNode().inject(platform, platform.timeline)

    assert record.target == victim and record.hit.detail["pods"] == [victim]
    assert read(core, "node", machine) is None
    until("the machine_deleted event", lambda: first(platform.timeline.events(), NodeEv.MACHINE_DELETED,
                                                     where=lambda e: e.data.machine == machine) is not None)
    assert first(platform.timeline.events(), NodeEv.LOST, node=victim,
                 where=lambda e: e.data.action == "delete-node") is not None


def test_deleting_a_node_that_is_not_there_is_a_404_failure(make_platform):
    platform = make_platform()
    started(platform)
    with pytest.raises(InjectionFailed, match=r"deleting node no-such-node failed: HTTP 404 .*already gone"):
        DeleteNode(machine="no-such-node").inject(platform, platform.timeline)
    assert fault_events(platform) == [FaultEv.PLANNED]                         # never recorded as injected


def test_a_pod_replaced_between_plan_and_inject_is_a_409_failure(make_platform, core, namespace):
    platform = make_platform()
    job = started(platform)
    victim = m.worker_pod_name(job.run_id, 1)
    fault = DeletePod()
    planned_uid = platform.pods.get(victim).labels["uid"]
    plan = fault.plan(platform)
    assert planned_uid in plan.actions[0]

    core.delete_namespaced_pod(victim, namespace, body={"gracePeriodSeconds": 0}, _preload_content=False)
    until("the replacement", lambda: platform.pods.get(victim).labels["uid"] != planned_uid
          and platform.pods.get(victim).state is NodeState.RUNNING)

    with pytest.raises(InjectionFailed, match=r"HTTP 409 .*changed since the fault was planned"):
        fault._inject(platform, plan, platform.timeline)
    assert read(core, "pod", victim, namespace)["metadata"]["uid"] != planned_uid   # the new pod is untouched


def test_a_pod_already_gone_is_a_404_failure(make_platform, namespace):
    platform = make_platform()
    with pytest.raises(InjectionFailed, match=r"deleting pod .*/nope .*HTTP 404 .*already gone"):
        platform.actions.delete_pod("nope", grace_s=0)


@pytest.fixture
def ci_runner(admin, namespace):
    """RBAC for a 'CI runner' (user viewer): may run jobs and watch them, may not hurt anything."""
    from kubernetes import client
    rbac = client.RbacAuthorizationV1Api(admin)
    rules = [
        {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["services", "persistentvolumeclaims"], "verbs": ["create", "delete"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create", "delete"]},
        {"apiGroups": ["elastic.pytorch.org"], "resources": ["elasticjobs"], "verbs": ["create", "delete"]},
    ]
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "ci-runner"}, "rules": rules},
                                _preload_content=False)
    subject = {"kind": "User", "name": "viewer", "apiGroup": "rbac.authorization.k8s.io"}
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "ci-runner"}, "subjects": [subject],
        "roleRef": {"kind": "Role", "name": "ci-runner", "apiGroup": "rbac.authorization.k8s.io"}},
        _preload_content=False)
    name = f"{namespace}-node-reader"
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]}, _preload_content=False)
    rbac.create_cluster_role_binding({"metadata": {"name": name}, "subjects": [subject],
                                      "roleRef": {"kind": "ClusterRole", "name": name,
                                                  "apiGroup": "rbac.authorization.k8s.io"}}, _preload_content=False)
    yield
    rbac.delete_cluster_role_binding(name, _preload_content=False)
    rbac.delete_cluster_role(name, _preload_content=False)


@pytest.mark.parametrize("fault", [DeletePod(), DeletePodGraceful(grace_s=5), EvictPod(), CordonNode(),
                                   DrainNode(timeout_s=5), DeleteNode()], ids=lambda f: f.name)
def test_an_rbac_denied_fault_fails_loudly_and_hits_nothing(k8s_api, ci_runner, make_platform, core,
                                                             namespace, fault):
    from k8s_testenv import api_client
    platform = make_platform(api=api_client(k8s_api, "viewer"))
    job = started(platform)                               # the runner may run the job...
    victim = m.worker_pod_name(job.run_id, 1)
    uid = platform.pods.get(victim).labels["uid"]

    with pytest.raises(InjectionFailed, match=r"HTTP 403 .*forbidden.* -- the credentials in use are not allowed"):
        fault.inject(platform, platform.timeline)         # ...but not hurt it

    assert fault_events(platform) == [FaultEv.PLANNED]
    assert read(core, "pod", victim, namespace)["metadata"]["uid"] == uid
    assert not read(core, "node", platform.machine_of(victim))["spec"].get("unschedulable")


def test_a_token_without_any_binding_cannot_even_start(k8s_api, make_platform):
    from k8s_testenv import api_client

    from elastic_chaos.errors import PlatformError
    platform = make_platform(api=api_client(k8s_api, "nobody"))
    with pytest.raises(PlatformError, match="could not list pods: HTTP 403"):
        platform.start(JobSpec(nodes="1:2"))


def fake_docker(tmp_path: Path, exit_code: int = 0) -> Path:
    """A stand-in for docker (none here): records its arguments. Not a test of docker itself."""
    script = tmp_path / "docker"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/docker.calls\n"
                      f"[ {exit_code} = 0 ] || echo 'Error: No such container' >&2\nexit {exit_code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_stop_kind_node_kills_the_node_container_and_revert_starts_it(make_platform, tmp_path):
    docker = fake_docker(tmp_path)
    platform = make_platform(kind=True, docker=str(docker))
    job = started(platform)
    victim = m.worker_pod_name(job.run_id, 1)
    machine = platform.machine_of(victim)
    fault = StopKindNode()

    record = fault.inject(platform, platform.timeline)
    fault.revert(platform, platform.timeline, record)

    assert (tmp_path / "docker.calls").read_text().splitlines() == [f"kill {machine}", f"start {machine}"]
    assert record.target == victim and record.hit.action == "docker-kill"


def test_stop_kind_node_fails_loudly_when_docker_refuses_or_is_missing(make_platform, tmp_path):
    platform = make_platform(kind=True, docker=str(fake_docker(tmp_path, exit_code=1)))
    started(platform)
    with pytest.raises(InjectionFailed, match="No such container"):
        StopKindNode().inject(platform, platform.timeline)
    missing = make_platform(kind=True, docker=os.fspath(tmp_path / "no-docker-here"))
    with pytest.raises(FaultUnavailable, match="not on PATH"):
        missing.stop_machine("x")


def test_kubernetes_faults_refuse_other_platforms_with_the_reason(tmp_path):
    from elastic_chaos.events import Timeline
    from elastic_chaos.platforms.local.platform import LocalPlatform
    local = LocalPlatform(Timeline(), tmp_path)
    from elastic_chaos.faults.catalog import all_faults
    for cls in (c for c in all_faults() if "kubernetes" in c.platforms or "kind" in c.platforms):
        name = cls.name
        with pytest.raises(FaultUnavailable, match=f"{name} .*kind"):
            cls().plan(local)


def test_link_faults_where_the_machines_are_not_ours_are_unavailable_with_the_reason(make_platform):
    from elastic_chaos.platforms.capabilities import LinkDegrader
    plain = make_platform()           # no cluster profile: nobody operates its machines
    assert "needs the machines' owner" in (plain.lacks(LinkDegrader) or "")
    with pytest.raises(FaultUnavailable, match="degrading the link between machines"):
        plain.capability(LinkDegrader)
    kind = make_platform(kind=True)
    assert "Docker" in (kind.lacks(LinkDegrader) or "") and "make cluster-up" in (kind.lacks(LinkDegrader) or "")
