"""Terminate, ASG replacement observed, and no replacement under insufficient capacity (moto)."""
from __future__ import annotations

from aws_helpers import platform, side

from elastic_chaos.events import NodeEv, Source, Timeline
from elastic_chaos.faults.aws import InsufficientCapacity, TerminateInstance
from elastic_chaos.gameday.runner import GamedayOptions, run_gameday
from elastic_chaos.platforms.aws.clients import describe_groups, describe_instances


def test_terminate_instance_terminates_the_newest_tagged_instance_and_audits_it(clients, fleet, tmp_path):
    aws = side(clients, tmp_path / "state")
    record = TerminateInstance().inject(platform(aws, tmp_path), Timeline())
    victim = record.hit.detail["instances"][0]
    state = {i.id: i.state for i in describe_instances(clients.ec2, ids=fleet.spot)}
    assert state[victim] == "terminated"
    assert sorted(s for i, s in state.items() if i != victim) == ["running", "running"]
    audit = aws.guard.audit.entries()
    assert [(e["phase"], e["operation"], e["target"]) for e in audit] == [
        ("attempt", "TerminateInstances", victim), ("result", "TerminateInstances", victim)]
    assert audit[1]["result"] == "ok"


def test_the_game_day_observes_the_auto_scaling_group_replace_a_terminated_node(clients, fleet, tmp_path):
    aws = side(clients, tmp_path / "state")
    opts = GamedayOptions(fault=TerminateInstance(), poll_s=0.2, replacement_timeout_s=30,
                          report_dir=tmp_path / "report")
    result = run_gameday(platform(aws, tmp_path), aws, opts, out=lambda line: None)
    assert result.code == 0, result.reasons
    group = describe_groups(clients.autoscaling, [fleet.group])[0]
    replacement = result.split.instance
    assert replacement in group.instances and replacement not in fleet.spot
    assert result.split.provision_s is not None and result.split.provision_s >= 0
    assert result.split.join_s is None and "Kubernetes node" in result.split.missing[0]
    timeline = Timeline.load(tmp_path / "report" / "timeline.jsonl")
    kinds = [(e.type, e.data.instance) for e in timeline.select(Source.NODE)]
    victim = result.record.hit.detail["instances"][0]
    assert (NodeEv.INSTANCE_STATE, victim) in kinds and (NodeEv.INSTANCE_LAUNCHED, replacement) in kinds


def test_insufficient_capacity_starves_the_group_while_a_node_is_terminated(clients, fleet, tmp_path):
    aws = side(clients, tmp_path / "state")
    fault = InsufficientCapacity(duration_s=60, poll_s=0.2)
    record = fault.inject(platform(aws, tmp_path), Timeline())
    results = [e for e in aws.guard.audit.entries() if e["phase"] == "result"]
    assert [e["operation"] for e in results] == ["CreateExperimentTemplate", "StartExperiment",
                                                 "TerminateInstances", "DeleteExperimentTemplate"]
    action = results[0]["params"]["actions"]["starve"]
    assert action["actionId"] == "aws:ec2:asg-insufficient-instance-capacity-error"
    assert action["parameters"] == {"availabilityZoneIdentifiers": "us-west-2a", "duration": "PT1M",
                                    "percentage": "100"}
    group = describe_groups(clients.autoscaling, [fleet.group])[0]
    assert results[0]["params"]["targets"]["AutoScalingGroups"]["resourceArns"] == [group.arn]
    assert record.detail["group"] == fleet.group and record.detail["status"] == "completed"
    assert clients.fis.list_experiment_templates()["experimentTemplates"] == []
