"""The pure parts of the game-day safety model: blast radius, audit log, journal, guard,
stop conditions, providerID mapping, the replacement split. No server needed."""
from __future__ import annotations

import time

import pytest

from elastic_chaos.errors import SpecError
from elastic_chaos.events import Event, EventType, NodeEv, RdzvEv
from elastic_chaos.gameday.replacement import split
from elastic_chaos.gameday.stops import StopConditions
from elastic_chaos.platforms.aws.actions import iso_duration, spot_interruption_template
from elastic_chaos.platforms.aws.clients import instance_id_from_provider_id
from elastic_chaos.platforms.aws.eks import machine_from_node
from elastic_chaos.platforms.aws.guard import (
    AuditLog,
    Call,
    CleanupJournal,
    Guard,
    SafetyLimits,
    UnsafeOperation,
    check_blast_radius,
)

NODES = ["n1", "n2", "n3", "n4"]


def test_blast_radius_allows_what_the_limits_allow():
    check_blast_radius(["n4"], NODES, SafetyLimits(max_nodes=1, max_percent=25))
    check_blast_radius(["n3", "n4"], NODES, SafetyLimits(max_nodes=2, max_percent=50))


@pytest.mark.parametrize(("targets", "limits", "says"), [
    (["n3", "n4"], SafetyLimits(max_nodes=1, max_percent=100), "--max-nodes is 1"),
    (["n3", "n4"], SafetyLimits(max_nodes=4, max_percent=40), "2 of 4 node(s) is 50%"),
    (["other"], SafetyLimits(), "not nodes of the targeted job"),
    ([], SafetyLimits(), "no target resolved"),
])
def test_blast_radius_refuses_beyond_the_limits(targets, limits, says):
    with pytest.raises(UnsafeOperation, match=says.replace("(", r"\(").replace(")", r"\)")):
        check_blast_radius(targets, NODES, limits)


def test_limits_must_make_sense():
    with pytest.raises(SpecError):
        SafetyLimits(max_nodes=0)
    with pytest.raises(SpecError):
        SafetyLimits(max_percent=0)


def test_an_unarmed_guard_refuses_and_a_dry_one_calls_nothing(tmp_path):
    calls = []
    call = Call("ec2", "TerminateInstances", "i-1")
    with pytest.raises(UnsafeOperation, match="--gameday"):
        Guard(dry_run=False, armed=False).mutate(call, lambda: calls.append(1))
    dry = Guard(dry_run=True, armed=True)
    assert dry.mutate(call, lambda: calls.append(1)) is None
    assert calls == [] and dry.calls == [call]


def test_a_stopped_guard_lets_only_cleanup_through(tmp_path):
    guard = Guard(dry_run=False, armed=True, audit=AuditLog(tmp_path / "a.jsonl", "r"))
    guard.stop("deadline")
    with pytest.raises(UnsafeOperation, match="stopped \\(deadline\\)"):
        guard.mutate(Call("ec2", "TerminateInstances", "i-1"), lambda: None)
    assert guard.mutate(Call("fis", "DeleteExperimentTemplate", "t"), lambda: "ok", cleanup=True) == "ok"


def test_the_audit_log_records_a_failed_call_and_only_appends(tmp_path):
    path = tmp_path / "audit.jsonl"
    path.write_text('{"earlier": "run"}\n')
    guard = Guard(dry_run=False, armed=True, audit=AuditLog(path, "r"))

    def refused():
        raise RuntimeError("AccessDenied")
    with pytest.raises(RuntimeError):
        guard.mutate(Call("ec2", "TerminateInstances", "i-1", {"InstanceIds": ["i-1"]}), refused)
    lines = path.read_text().splitlines()
    assert lines[0] == '{"earlier": "run"}'
    entries = AuditLog(path, "r").entries("r")
    assert [(e["phase"], e.get("result")) for e in entries] == [("attempt", None), ("result", "error")]
    assert entries[1]["error"] == "AccessDenied" and entries[1]["target"] == "i-1"


def test_the_journal_replays_newest_first_and_forgets_closed_entries(tmp_path):
    journal = CleanupJournal(tmp_path / "j.jsonl", "r")
    template = journal.open("delete-fis-template", "t-1")
    journal.open("stop-fis-experiment", "e-1")
    with (tmp_path / "j.jsonl").open("a") as f:
        f.write('{"op": "open", "id": "cut')          # a line cut off by a crash
    assert [u.target for u in journal.pending()] == ["e-1", "t-1"]
    journal.close(template, "ok")
    assert [u.target for u in CleanupJournal(tmp_path / "j.jsonl", "other").pending()] == ["e-1"]


def test_stop_conditions_fire_on_a_failed_job_and_on_the_deadline():
    guard = Guard(dry_run=False, armed=True)
    failed = StopConditions(guard, deadline_s=600, job_failed=lambda: "worker-1 exited 1")
    assert failed.reason() == "the job has failed for good: worker-1 exited 1"
    assert guard.stopped == failed.reason()
    late = StopConditions(Guard(dry_run=False, armed=True), deadline_s=0.0)
    time.sleep(0.01)
    assert late.reason() == "the deadline passed (0s)"


def test_provider_ids_map_to_instances_and_nodes_read_their_capacity_type():
    assert instance_id_from_provider_id("aws:///us-west-2a/i-0abc123") == "i-0abc123"
    with pytest.raises(SpecError, match="not an EC2 instance"):
        instance_id_from_provider_id("kind://docker/elastic-chaos/worker")
    node = {"metadata": {"name": "ip-10-0-1-2", "labels": {"eks.amazonaws.com/capacityType": "SPOT",
                                                           "eks.amazonaws.com/nodegroup": "gpu-spot"}},
            "spec": {"providerID": "aws:///us-west-2b/i-0def", "unschedulable": True},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    machine = machine_from_node(node)
    assert (machine.instance_id, machine.capacity_type, machine.node_group, machine.ready, machine.unschedulable) \
        == ("i-0def", "SPOT", "gpu-spot", True, True)
    karpenter = {"metadata": {"name": "k", "labels": {"karpenter.sh/capacity-type": "on-demand"}},
                 "spec": {"providerID": "aws:///us-west-2b/i-1"}}
    assert machine_from_node(karpenter).capacity_type == "ON_DEMAND"


def test_fis_durations_and_the_notice_range():
    assert [iso_duration(s) for s in (120, 90, 45, 900)] == ["PT2M", "PT1M30S", "PT45S", "PT15M"]
    with pytest.raises(SpecError, match="2 to 15 minutes"):
        spot_interruption_template(["arn"], before_s=60, role_arn="r", run_id="x")
    with pytest.raises(SpecError, match="--fis-role-arn"):
        spot_interruption_template(["arn"], before_s=120, role_arn="", run_id="x")


def _ev(t: float, type: EventType, **data: object) -> Event:
    return Event.make(type, t, None, data)


def test_the_replacement_split_adds_up_and_says_what_is_missing():
    events = [_ev(100.5, NodeEv.INSTANCE_STATE, instance="i-old", state="shutting-down"),
              _ev(130.0, NodeEv.INSTANCE_STATE, instance="i-new", state="running", new=True),
              _ev(190.0, NodeEv.INSTANCE_JOINED, instance="i-new"),
              _ev(215.0, RdzvEv.ROUND_COMPLETE)]
    s = split(events, fault_at=100.0, targets=["i-old"])
    assert (s.provision_s, s.join_s, s.rendezvous_s, s.replacement_s) == (29.5, 60.0, 25.0, 114.5)
    partial = split(events[:2], fault_at=100.0, targets=["i-old"])
    assert partial.join_s is None and partial.replacement_s is None and "Ready" in partial.missing[0]
    nothing = split([], fault_at=100.0, targets=["i-old"])
    assert nothing.lost_at == 100.0 and nothing.provision_s is None
