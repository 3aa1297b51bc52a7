"""The eks platform on a real kube-apiserver (machines played by the cluster sim) and a
real moto server (the EC2 side): nodes map to instances through providerID, the AWS faults
aim at the instance under a worker pod, and Kubernetes faults go through the Guard."""
from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "aws"))
from moto_server import CountingProxy, MotoServer  # noqa: E402

from elastic_chaos.events import Timeline  # noqa: E402
from elastic_chaos.faults.aws import TerminateInstance  # noqa: E402
from elastic_chaos.faults.kubernetes import DrainNode  # noqa: E402
from elastic_chaos.gameday.cleanup import replay  # noqa: E402
from elastic_chaos.platforms.aws.clients import describe_instances, make_clients  # noqa: E402
from elastic_chaos.platforms.aws.eks import EksOptions, EksPlatform  # noqa: E402
from elastic_chaos.platforms.aws.guard import AuditLog, CleanupJournal, Guard, SafetyLimits  # noqa: E402
from elastic_chaos.platforms.aws.targets import AwsSide  # noqa: E402
from elastic_chaos.platforms.kubernetes import manifests as m  # noqa: E402
from elastic_chaos.spec import JobSpec  # noqa: E402

pytestmark = [pytest.mark.k8s_api, pytest.mark.aws]


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = MotoServer(tmp_path_factory.mktemp("moto") / "moto.log").start()
    yield server
    server.stop()


@pytest.fixture
def ec2_nodes(moto: MotoServer, sim: Any, core: Any, namespace: str,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, CountingProxy, dict[str, str]]]:
    """A spot instance under each of the sim's spot machines (providerID), via a counting proxy."""
    moto.reset()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    proxy = CountingProxy(moto.port).start()
    aws = make_clients(region="us-west-2", endpoint_url=proxy.endpoint)
    spot = [n for n in sim.machines if "-spot-" in n]
    image = aws.ec2.describe_images()["Images"][0]["ImageId"]
    run = aws.ec2.run_instances(ImageId=image, MinCount=len(spot), MaxCount=len(spot), InstanceType="g5.xlarge",
                                InstanceMarketOptions={"MarketType": "spot"},
                                TagSpecifications=[{"ResourceType": "instance",
                                                    "Tags": [{"Key": "eks:cluster-name", "Value": "test"}]}])
    mapping = {}
    for machine, inst in zip(spot, run["Instances"], strict=True):
        mapping[machine] = inst["InstanceId"]
        core.patch_node(machine, {"spec": {"providerID": f"aws:///us-west-2a/{inst['InstanceId']}"}},
                        _preload_content=False)
    yield aws, proxy, mapping
    proxy.stop()


def eks_platform(admin: Any, namespace: str, job_etcd: Any, tmp_path: Path, aws: Any, *, dry_run: bool = False,
                 max_nodes: int = 1) -> EksPlatform:
    guard = Guard(dry_run=dry_run, armed=True, audit=AuditLog(tmp_path / "audit.jsonl", "t"),
                  journal=CleanupJournal(tmp_path / "journal.jsonl", "t"))
    side = AwsSide(aws, guard, run_id="t", limits=SafetyLimits(max_nodes, 100), tags={"eks:cluster-name": "test"})
    options = EksOptions(settings=m.kind_settings(namespace=namespace), etcd_endpoint=job_etcd.endpoint,
                         start_timeout_s=30.0, stop_timeout_s=15.0, watch_window_s=5)
    return EksPlatform(Timeline(), tmp_path / "run", options, aws_side=side, core_v1=client.CoreV1Api(admin),
                       apps_v1=client.AppsV1Api(admin), custom_objects=client.CustomObjectsApi(admin),
                       policy_v1=client.PolicyV1Api(admin))


@pytest.fixture
def running(admin, namespace, job_etcd, tmp_path, ec2_nodes) -> Iterator[tuple[EksPlatform, Any, Any, dict]]:
    aws, proxy, mapping = ec2_nodes
    platform = eks_platform(admin, namespace, job_etcd, tmp_path, aws)
    job = JobSpec(nodes="1:2")
    platform.start(job)
    yield platform, aws, proxy, mapping
    platform.stop()


def test_worker_pods_map_to_their_spot_instances_through_provider_id(running):
    platform, aws, _, mapping = running
    population = platform.aws_population()
    assert len(population) == 2
    for target in population:
        assert target.instance.id == mapping[target.machine] and target.instance.spot
        assert target.pods and platform.machine_of(target.pods[0]) == target.machine
    machine = platform.machine(population[0].machine)
    assert machine.capacity_type == "SPOT" and machine.instance_id == mapping[machine.name]


def test_terminate_instance_hits_the_instance_under_the_newest_worker(running):
    platform, aws, _, mapping = running
    newest = platform.alive_nodes()[-1].name
    record = TerminateInstance().inject(platform, platform.timeline)
    instance = platform.instance_of(newest)
    assert record.hit.detail["instances"] == [instance]
    assert record.hit.detail["pods"] == [newest]
    assert describe_instances(aws.ec2, ids=[instance])[0].state == "terminated"


def test_a_drain_is_audited_journalled_and_the_uncordon_replays_after_a_crash(running, core, tmp_path):
    platform, *_ = running
    record = DrainNode().inject(platform, platform.timeline)
    machine = record.detail["machine"]
    node = json.loads(core.read_node(machine, _preload_content=False).data)
    assert node["spec"].get("unschedulable") is True
    audit = [(e["phase"], e["operation"]) for e in platform.guard.audit.entries()]
    assert ("result", "Drain") in audit
    assert [u.kind for u in platform.guard.journal.pending()] == ["uncordon"]
    # the run "crashes" here: no revert. A later cleanup uncordons from the journal alone.
    later = Guard(dry_run=False, armed=True, audit=AuditLog(tmp_path / "audit.jsonl", "cleanup"),
                  journal=CleanupJournal(tmp_path / "journal.jsonl", "cleanup"))
    done = replay(later, core_v1=core)
    assert [(r.undo.kind, r.undo.target, r.result) for r in done] == [("uncordon", machine, "ok")]
    node = json.loads(core.read_node(machine, _preload_content=False).data)
    assert not node["spec"].get("unschedulable")
    assert later.journal.pending() == []


def test_a_dry_run_drain_touches_no_node(admin, namespace, job_etcd, tmp_path, ec2_nodes, core):
    aws, proxy, _ = ec2_nodes
    platform = eks_platform(admin, namespace, job_etcd, tmp_path, aws, dry_run=True)
    platform.start(JobSpec(nodes="1:2"))
    try:
        proxy.clear()
        record = DrainNode().inject(platform, platform.timeline)
        node = json.loads(core.read_node(record.detail["machine"], _preload_content=False).data)
        assert not node["spec"].get("unschedulable")
        assert [c.operation for c in platform.guard.calls] == ["Drain"]
        assert platform.guard.audit.entries() == [] and platform.guard.journal.pending() == []
        assert proxy.mutating() == []
    finally:
        platform.stop()


def _gameday(k8s_api, namespace, proxy, state, *extra):
    from elastic_chaos.cli.main import main
    return main(["gameday", *extra, "--namespace", namespace, "--kubeconfig", str(k8s_api.kubeconfig("admin")),
                 "--tag", "eks:cluster-name=test", "--region", "us-west-2", "--endpoint-url", proxy.endpoint,
                 "--state-dir", str(state), "--max-percent", "100", "--poll", "0.2"])


def test_gameday_dry_run_on_a_job_resolves_its_nodes_and_changes_nothing(running, k8s_api, namespace, core,
                                                                         tmp_path, capsys):
    platform, aws, proxy, mapping = running
    proxy.clear()
    code = _gameday(k8s_api, namespace, proxy, tmp_path / "state", "terminate-instance", "--job",
                    platform.job.run_id, "--dry-run")
    out = capsys.readouterr().out
    assert code == 0, out
    newest = platform.alive_nodes()[-1]
    machine = newest.labels["machine"]
    assert f"target: node {machine} = {mapping[machine]} (spot" in out and newest.name in out
    assert f"would call ec2:TerminateInstances {mapping[machine]}" in out
    assert proxy.mutating() == []


def test_gameday_drains_the_node_under_a_jobs_worker_and_uncordons_it(running, k8s_api, namespace, core,
                                                                      tmp_path, capsys):
    platform, aws, proxy, mapping = running
    code = _gameday(k8s_api, namespace, proxy, tmp_path / "state", "drain-node", "--job", platform.job.run_id,
                    "--gameday", "--report-dir", str(tmp_path / "report"))
    out = capsys.readouterr().out
    assert code == 0, out
    report = json.loads((tmp_path / "report" / "gameday.json").read_text())
    machine = report["record"]["machine"]
    node = json.loads(core.read_node(machine, _preload_content=False).data)
    assert not node["spec"].get("unschedulable")                     # reverted
    audit = [json.loads(line) for line in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
    assert [(e["phase"], e["operation"]) for e in audit] == [
        ("attempt", "Drain"), ("result", "Drain"), ("attempt", "PatchNode"), ("result", "PatchNode")]
    assert CleanupJournal(tmp_path / "state" / "cleanup-journal.jsonl", "x").pending() == []


def test_link_faults_on_eks_without_a_cluster_name_say_which_fis_actions_and_what_they_need(
        admin, namespace, job_etcd, tmp_path, ec2_nodes):
    from elastic_chaos.errors import FaultUnavailable
    from elastic_chaos.platforms.capabilities import LinkDegrader
    platform = eks_platform(admin, namespace, job_etcd, tmp_path, ec2_nodes[0])
    reason = platform.lacks(LinkDegrader) or ""
    assert "aws:eks:pod-network-latency" in reason and "aws:eks:pod-network-packet-loss" in reason
    assert "EksOptions.cluster" in reason and "EksOptions.fis_service_account" in reason
    with pytest.raises(FaultUnavailable, match="docs/EKS.md, 'Link faults'"):
        platform.capability(LinkDegrader)
