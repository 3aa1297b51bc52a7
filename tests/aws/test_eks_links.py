"""Link faults on EKS: FIS's pod network actions, their templates, the safety rules that
admit them, their lifecycle against a real moto server, and the report saying "asked".

moto's EKS is metadata only and there is no kube-apiserver here: ``Pods`` plays the
Kubernetes part of the platform (the job's worker pods, their labels and IPs) and goes
through the same FisLinks code EksPlatform offers. moto's FIS keeps books: its
experiment states are set to advance one per three reads, so an experiment runs until
it is stopped."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from aws_fleet import FIS_ROLE
from aws_helpers import side

from elastic_chaos.analysis.link import LinkCost, link_cost
from elastic_chaos.errors import FaultUnavailable, InjectionFailed, SpecError
from elastic_chaos.events import FaultEv, NodeEv, Timeline
from elastic_chaos.faults.network import Bandwidth, FlappingLink, Latency, PacketLoss
from elastic_chaos.platforms.aws.actions import FisPods, pod_latency_template, pod_packet_loss_template
from elastic_chaos.platforms.aws.eks import EksOptions, single_pod_selector
from elastic_chaos.platforms.aws.guard import PodScope, UnsafeOperation, check_fis_template
from elastic_chaos.platforms.aws.links import FisLinks
from elastic_chaos.platforms.capabilities import LinkDegrader
from elastic_chaos.platforms.nodes import NodeInfo, NodeState

JOB = "training.kubeflow.org/job-name=bert,training.kubeflow.org/replica-type=worker"
POD_0 = f"{JOB},training.kubeflow.org/replica-index=0"
PODS = FisPods("gameday", "training", POD_0)
COMMON: dict[str, Any] = {"sources": ("10.0.1.11/32", "10.0.2.12/32"), "duration_s": 3600,
                          "service_account": "fis-pod-actions", "role_arn": FIS_ROLE, "run_id": "test-run"}


@dataclass
class Pods:
    """The Kubernetes part of the eks platform, played: the job's worker pods (name -> IP)."""

    aws_side: Any
    eks_options: EksOptions = field(default_factory=lambda: EksOptions(
        cluster="gameday", fis_service_account="fis-pod-actions", fis_link_duration_s=900))
    ips: dict[str, str] = field(default_factory=lambda: {"bert-worker-0": "10.0.1.10", "bert-worker-1": "10.0.1.11",
                                                         "bert-worker-2": "10.0.2.12", "bert-worker-3": "10.0.2.13"})
    timeline: Timeline = field(default_factory=Timeline)
    job: Any = None
    name: str = "eks"

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo(n, NodeState.RUNNING, float(i), labels={"address": ip})
                for i, (n, ip) in enumerate(self.ips.items())]

    alive_nodes = nodes

    def _require_node(self, node: str) -> NodeInfo:
        return next(n for n in self.nodes() if n.name == node)

    def store_host(self) -> str | None:
        return None

    def fis_pods(self, node: str) -> tuple[FisPods, PodScope]:
        index = node.rsplit("-", 1)[-1]
        selector = single_pod_selector(JOB, {"training.kubeflow.org/replica-index": index})
        assert selector is not None
        return FisPods("gameday", "training", selector), PodScope("training", JOB)

    def pod_address(self, pod: str) -> str | None:
        return self.ips.get(pod)

    def capability(self, kind: type) -> Any:
        assert kind is LinkDegrader
        return self.links

    offered = capability   # the fault's plan reads how the platform makes it (LinkDegrader.plan_steps)

    @property
    def links(self) -> FisLinks:
        if not hasattr(self, "_links"):
            self._links = FisLinks(self)   # type: ignore[arg-type]
            self._links.poll_s = 0.05
            self._links.ready_timeout_s = 30
        return self._links


@pytest.fixture
def running_until_stopped(moto):
    """moto's FIS experiments advance one state per three reads (never past running unless stopped)."""
    moto.transition("fis::experiment", {"progression": "manual", "times": 3})
    yield
    moto.transition("fis::experiment", None)


def test_the_latency_template_aims_fis_at_one_pod_of_the_job_with_delay_jitter_and_the_peers_ips():
    template = pod_latency_template(PODS, delay_ms=20, jitter_ms=5, **COMMON)
    assert template["targets"] == {"Pods": {
        "resourceType": "aws:eks:pod", "selectionMode": "ALL",
        "parameters": {"clusterIdentifier": "gameday", "namespace": "training", "selectorType": "labelSelector",
                       "selectorValue": POD_0}}}
    assert template["actions"] == {"delay": {
        "actionId": "aws:eks:pod-network-latency", "targets": {"Pods": "Pods"},
        "parameters": {"duration": "PT60M", "kubernetesServiceAccount": "fis-pod-actions",
                       "delayMilliseconds": "20", "jitterMilliseconds": "5", "sources": "10.0.1.11/32,10.0.2.12/32"}}}
    assert template["roleArn"] == FIS_ROLE and template["tags"] == {"elastic-chaos/run-id": "test-run"}
    assert template["stopConditions"] == [{"source": "none"}]


def test_the_packet_loss_template_asks_fis_for_a_whole_loss_percentage():
    template = pod_packet_loss_template(PODS, loss=0.05, **COMMON)
    assert template["targets"]["Pods"]["parameters"]["selectorValue"] == POD_0
    assert template["actions"] == {"loss": {
        "actionId": "aws:eks:pod-network-packet-loss", "targets": {"Pods": "Pods"},
        "parameters": {"duration": "PT60M", "kubernetesServiceAccount": "fis-pod-actions", "lossPercent": "5",
                       "sources": "10.0.1.11/32,10.0.2.12/32"}}}
    with pytest.raises(SpecError, match="whole number; 5.5 is not one"):
        pod_packet_loss_template(PODS, loss=0.055, **COMMON)
    with pytest.raises(SpecError, match="service account"):
        pod_packet_loss_template(PODS, loss=0.05, **{**COMMON, "service_account": ""})


def test_a_pod_is_singled_out_by_the_jobs_selector_and_a_label_only_it_carries():
    assert single_pod_selector(JOB, {"training.kubeflow.org/replica-index": "3", "app": "x"}) == \
        f"{JOB},training.kubeflow.org/replica-index=3"
    assert single_pod_selector("app=bert", {"statefulset.kubernetes.io/pod-name": "bert-1"}) == \
        "app=bert,statefulset.kubernetes.io/pod-name=bert-1"
    assert single_pod_selector(JOB, {"app": "x"}) is None


@pytest.mark.parametrize(("change", "says"), [
    ({"namespace": "kube-system"}, "pods are in namespace training; refusing to aim at namespace kube-system"),
    ({"selectorValue": "training.kubeflow.org/replica-index=0"}, "the selector lacks training.kubeflow.org/job-name"),
    ({"selectorType": "deploymentName", "selectorValue": "bert"}, "only a labelSelector"),
])
def test_the_guard_refuses_a_pod_target_that_could_reach_beyond_the_job(change, says):
    template = pod_latency_template(PODS, delay_ms=20, jitter_ms=0, **COMMON)
    check_fis_template(template, PodScope("training", JOB))      # the job's own pod: admitted
    template["targets"]["Pods"]["parameters"].update(change)
    with pytest.raises(UnsafeOperation, match=says.replace("(", r"\(")):
        check_fis_template(template, PodScope("training", JOB))


def test_the_guard_refuses_an_action_it_does_not_admit_and_a_pod_target_without_a_job():
    template = pod_latency_template(PODS, delay_ms=20, jitter_ms=0, **COMMON)
    with pytest.raises(UnsafeOperation, match="no job's pods to confine it to"):
        check_fis_template(template, None)
    template["actions"]["delay"]["actionId"] = "aws:eks:pod-delete"
    with pytest.raises(UnsafeOperation, match="refused FIS action aws:eks:pod-delete"):
        check_fis_template(template, PodScope("training", JOB))


def test_a_template_for_a_foreign_namespace_is_refused_before_any_call(clients, proxy, tmp_path):
    aws = side(clients, tmp_path / "state")
    template = pod_latency_template(FisPods("gameday", "kube-system", POD_0), delay_ms=20, jitter_ms=0, **COMMON)
    proxy.clear()
    with pytest.raises(UnsafeOperation, match="namespace training"):
        aws.actions.begin_experiment(template, pods=PodScope("training", JOB))
    assert proxy.mutating() == [] and aws.guard.audit.entries() == []


def test_a_latency_fault_on_eks_creates_starts_stops_and_deletes_its_experiment(clients, proxy, tmp_path,
                                                                                running_until_stopped):
    aws = side(clients, tmp_path / "state", max_percent=25)
    pods = Pods(aws)
    fault = Latency(between=("bert-worker-0", "bert-worker-1", "bert-worker-2"), delay_ms=20.0, jitter_ms=5.0)
    record = fault.inject(pods, pods.timeline)   # type: ignore[arg-type]
    experiment = record.detail["link"]
    assert clients.fis.get_experiment(id=experiment)["experiment"]["state"]["status"] == "running"
    template = clients.fis.list_experiment_templates()["experimentTemplates"]
    assert len(template) == 1
    assert [u.kind for u in aws.guard.journal.pending()] == ["stop-fis-experiment", "delete-fis-template"]
    fault.revert(pods, pods.timeline, record)   # type: ignore[arg-type]
    ops = [e["operation"] for e in aws.guard.audit.entries() if e["phase"] == "result"]
    assert ops == ["CreateExperimentTemplate", "StartExperiment", "StopExperiment", "DeleteExperimentTemplate"]
    assert clients.fis.get_experiment(id=experiment)["experiment"]["state"]["status"] == "stopped"
    assert clients.fis.list_experiment_templates()["experimentTemplates"] == []
    assert aws.guard.journal.pending() == []
    create = next(e for e in aws.guard.audit.entries() if e["operation"] == "CreateExperimentTemplate")
    params = create["params"]["actions"]["delay"]["parameters"]
    assert params["sources"] == "10.0.1.11/32,10.0.2.12/32" and params["duration"] == "PT15M"
    assert create["params"]["targets"]["Pods"]["parameters"]["selectorValue"] == POD_0
    assert [e.type for e in pods.timeline.events() if e.type in (NodeEv.LINK_DEGRADED, NodeEv.LINK_RESTORED,
                                                                FaultEv.REVERTED)] == [
        NodeEv.LINK_DEGRADED, NodeEv.LINK_RESTORED, FaultEv.REVERTED]
    # the record says who made it and carries no probe: the report prints it as asked, not measured
    assert record.detail["asked_of"] == "AWS FIS" and record.detail["probe"] is None
    cost = link_cost(pods.timeline.events(), target=record.target, injected_at=record.injected_at, fault="latency",
                     detail=record.detail)
    line = cost.describe()
    assert "delay 20.0 ms asked of AWS FIS, not measured" in line, line
    assert " measured (" not in line and cost.rtt_ms is None
    assert LinkCost.from_json(cost.target, cost.injected_at, json.loads(json.dumps(cost.to_json()))).asked_of \
        == "AWS FIS"


def test_more_of_the_job_than_max_percent_is_refused_before_any_call(clients, proxy, tmp_path):
    pods = Pods(side(clients, tmp_path / "state", max_percent=20))   # 1 of 4 pods is 25 %
    proxy.clear()
    with pytest.raises(UnsafeOperation, match="1 of 4 node"):
        pods.links.degrade("bert-worker-0", (), loss=0.05)
    assert proxy.mutating() == []


@pytest.mark.parametrize(("fault", "words"), [
    (Bandwidth(between=("bert-worker-0",), mbit=10), "a bandwidth cap is not made on EKS"),
    (FlappingLink(between=("bert-worker-0",)), "a flapping link (down, up, over and over) is not made on EKS"),
    (Latency(between=("bert-worker-0",), to_store=True), "the link to the rendezvous store"),
    (Latency(between=("bert-worker-0",), delay_ms=20, reverse_delay_ms=5), "a delay set per direction"),
    (Latency(between=("bert-worker-0",), delay_ms=20, jitter_ms=2, reverse_jitter_ms=0), "a delay set per direction"),
    (PacketLoss(between=("bert-worker-0",), rate=0.05, burst=4), "a bursty loss (--burst"),
])
def test_what_fis_has_no_pod_action_for_is_refused_with_where_to_make_it(clients, proxy, tmp_path, fault, words):
    pods = Pods(side(clients, tmp_path / "state"))
    proxy.clear()
    with pytest.raises(FaultUnavailable) as refused:
        fault.inject(pods, pods.timeline)    # type: ignore[arg-type]
    assert words in str(refused.value) and "AWS FIS has no such pod action" in str(refused.value)
    assert "make cluster-up" in str(refused.value)
    if {"reverse_delay_ms", "reverse_jitter_ms", "burst"} & set(fault.shape()):   # these: the local platform too
        assert "--platform local" in str(refused.value)
    assert proxy.mutating() == []


def test_without_the_cluster_or_the_service_account_link_faults_say_what_they_need(clients, tmp_path):
    pods = Pods(side(clients, tmp_path / "state"), eks_options=EksOptions())
    reason = pods.links.unavailable()
    assert reason is not None and "EksOptions.cluster" in reason and "EksOptions.fis_service_account" in reason
    with pytest.raises(FaultUnavailable, match="need the EKS cluster"):
        PacketLoss(between=("bert-worker-0",), rate=0.05).inject(pods, pods.timeline)   # type: ignore[arg-type]


def test_a_peer_whose_pod_ip_is_unknown_is_not_guessed(clients, proxy, tmp_path):
    pods = Pods(side(clients, tmp_path / "state", max_percent=25))
    pods.ips["bert-worker-1"] = ""
    proxy.clear()
    with pytest.raises(InjectionFailed, match="no pod IP known for bert-worker-1"):
        pods.links.degrade("bert-worker-0", ("bert-worker-1",), loss=0.05)
    assert proxy.mutating() == []


def test_a_dry_run_records_the_experiments_calls_and_makes_none(clients, proxy, tmp_path):
    pods = Pods(side(clients, tmp_path / "state", dry_run=True, max_percent=25))
    proxy.clear()
    hit = pods.links.degrade("bert-worker-0", ("bert-worker-1",), loss=0.05)
    pods.links.restore("bert-worker-0", hit.detail["link"])
    assert proxy.mutating() == []
    calls = [c.operation for c in pods.aws_side.guard.calls]
    assert calls == ["CreateExperimentTemplate", "StartExperiment", "StopExperiment", "DeleteExperimentTemplate"]
    assert pods.aws_side.guard.calls[0].params["actions"]["loss"]["parameters"]["sources"] == "10.0.1.11/32"
