"""FIS experiments from template to cleanup, against a real moto server.

moto's FIS only keeps books; the FisEffect stand-in terminates the targets of a
completed spot-interruption experiment, as AWS would have."""
from __future__ import annotations

import json

from aws_helpers import platform, side
from aws_stand_in import FisEffect

from elastic_chaos.events import FaultEv, Timeline
from elastic_chaos.faults.aws import FisSpotInterruption
from elastic_chaos.platforms.aws.clients import describe_instances


def test_spot_interruption_creates_starts_follows_and_deletes_the_template(clients, direct, fleet, proxy,
                                                                         tmp_path):
    aws = side(clients, tmp_path / "state")
    fault = FisSpotInterruption(poll_s=0.2, timeout_s=60)
    timeline = Timeline()
    with FisEffect(direct.fis, direct.ec2) as effect:
        proxy.clear()
        record = fault.inject(platform(aws, tmp_path), timeline)
    ops = proxy.operations()
    create = ops.index("POST /experimentTemplates")
    start = ops.index("POST /experiments")
    follows = [i for i, op in enumerate(ops) if op.startswith("GET /experiments/")]
    delete = next(i for i, op in enumerate(ops) if op.startswith("DELETE /experimentTemplates/"))
    assert create < start < min(follows) < max(follows) < delete
    assert record.detail["status"] == "completed"
    assert [s for _, s in record.detail["states"]][-1] == "completed"
    assert clients.fis.list_experiment_templates()["experimentTemplates"] == []
    assert aws.guard.journal.pending() == []
    # the newest spot instance was the target, and AWS (the stand-in) interrupted it
    assert effect.terminated == [record.hit.detail["instances"][0]]
    assert record.hit.detail["instances"][0] in fleet.spot
    assert any(e.data.status == "running" for e in timeline.select(FaultEv.FIS_STATE))


def test_the_template_asks_for_the_real_spot_action_with_the_notice(clients, direct, fleet, tmp_path):
    aws = side(clients, tmp_path / "state")
    with FisEffect(direct.fis, direct.ec2):
        record = FisSpotInterruption(notice_s=180, poll_s=0.2, timeout_s=60).inject(platform(aws, tmp_path),
                                                                                     Timeline())
    create = next(e for e in aws.guard.audit.entries() if e["operation"] == "CreateExperimentTemplate")
    action = create["params"]["actions"]["interrupt"]
    assert action["actionId"] == "aws:ec2:send-spot-instance-interruptions"
    assert action["parameters"] == {"durationBeforeInterruption": "PT3M"}
    target = create["params"]["targets"]["SpotInstances"]
    assert target["resourceType"] == "aws:ec2:spot-instance"
    assert target["resourceArns"] == [f"arn:aws:ec2:us-west-2:123456789012:instance/{record.target}"]
    assert create["params"]["tags"] == {"elastic-chaos/run-id": "test-run"}
    assert json.dumps(create["params"]["stopConditions"]) == '[{"source": "none"}]'


def test_a_stop_alarm_stops_the_experiment_and_still_deletes_the_template(clients, fleet, tmp_path):
    cw = clients.cloudwatch
    cw.put_metric_alarm(AlarmName="loss-nan", MetricName="loss", Namespace="training", Statistic="Maximum",
                        Period=60, EvaluationPeriods=1, Threshold=1e9, ComparisonOperator="GreaterThanThreshold")
    aws = side(clients, tmp_path / "state", stop_alarm="loss-nan")
    fired = []

    def should_stop():   # the game day's stop check; the alarm fires once the experiment started
        if clients.fis.list_experiments()["experiments"] and not fired:
            cw.set_alarm_state(AlarmName="loss-nan", StateValue="ALARM", StateReason="test")
            fired.append(True)
        from elastic_chaos.platforms.aws.clients import alarm_state
        return "alarm" if alarm_state(cw, "loss-nan") == "ALARM" else None

    record = FisSpotInterruption(poll_s=0.2, timeout_s=60, should_stop=should_stop).inject(
        platform(aws, tmp_path), Timeline())
    ops = [e["operation"] for e in aws.guard.audit.entries() if e["phase"] == "result"]
    assert ops == ["CreateExperimentTemplate", "StartExperiment", "StopExperiment", "DeleteExperimentTemplate"]
    assert record.detail["stopped_because"] == "alarm"
    assert record.detail["status"] == "stopped"
    create = next(e for e in aws.guard.audit.entries() if e["operation"] == "CreateExperimentTemplate")
    assert create["params"]["stopConditions"][0]["source"] == "aws:cloudwatch:alarm"
    assert clients.fis.list_experiment_templates()["experimentTemplates"] == []
    assert all(i.state == "running" for i in describe_instances(clients.ec2, ids=fleet.spot))
