"""The game day's safety model through `elastic-chaos gameday`, counted at the server."""
from __future__ import annotations

import json

import pytest
from aws_fleet import FIS_ROLE, REGION
from aws_stand_in import FisEffect

from elastic_chaos.cli.main import main
from elastic_chaos.platforms.aws.clients import describe_instances

TAGS = ["--tag", "eks:cluster-name=gameday", "--tag", "eks:nodegroup-name=gpu-spot"]


def gameday(proxy, state, *extra):
    return main(["gameday", *extra, *TAGS, "--region", REGION, "--endpoint-url", proxy.endpoint,
                 "--fis-role-arn", FIS_ROLE, "--state-dir", str(state)])


def test_a_dry_run_prints_every_call_and_makes_no_mutating_call(clients, fleet, proxy, tmp_path, capsys):
    proxy.clear()
    code = gameday(proxy, tmp_path / "state", "spot-interruption", "--dry-run")
    out = capsys.readouterr().out
    assert code == 0, out
    assert proxy.mutating() == [], [s.operation for s in proxy.mutating()]
    assert "DescribeInstances" in proxy.operations()          # it did resolve, with reads
    for op in ("fis:CreateExperimentTemplate", "fis:StartExperiment", "fis:DeleteExperimentTemplate"):
        assert f"would call {op}" in out
    assert "aws:ec2:send-spot-instance-interruptions" in out and "PT2M" in out
    assert "target: " in out and "spot g5.xlarge" in out
    assert clients.fis.list_experiment_templates()["experimentTemplates"] == []
    assert all(i.state == "running" for i in describe_instances(clients.ec2, ids=fleet.spot))
    assert not (tmp_path / "state" / "audit.jsonl").exists()


@pytest.mark.parametrize("fault", ["terminate-instance", "insufficient-capacity"])
def test_dry_runs_of_the_other_aws_faults_make_no_mutating_call(clients, fleet, proxy, tmp_path, capsys, fault):
    proxy.clear()
    assert gameday(proxy, tmp_path / "state", fault, "--dry-run") == 0
    out = capsys.readouterr().out
    assert proxy.mutating() == []
    assert "would call ec2:TerminateInstances" in out


def test_without_gameday_nothing_destructive_happens(clients, fleet, proxy, tmp_path, capsys):
    proxy.clear()
    assert gameday(proxy, tmp_path / "state", "terminate-instance") == 2
    err = capsys.readouterr().err
    assert "--gameday" in err
    assert proxy.mutating() == []


def test_more_nodes_than_max_nodes_is_refused_before_any_call(clients, fleet, proxy, tmp_path, capsys):
    proxy.clear()
    assert gameday(proxy, tmp_path / "state", "terminate-instance", "--count", "2", "--gameday") == 2
    assert "blast radius: 2 node(s) targeted, --max-nodes is 1" in capsys.readouterr().err
    assert proxy.mutating() == []


def test_more_than_max_percent_of_the_job_is_refused_before_any_call(clients, fleet, proxy, tmp_path, capsys):
    proxy.clear()
    code = gameday(proxy, tmp_path / "state", "terminate-instance", "--max-percent", "30", "--gameday")
    assert code == 2
    assert "1 of 3 node(s) is 33%, --max-percent is 30%" in capsys.readouterr().err
    assert proxy.mutating() == []
    assert all(i.state == "running" for i in describe_instances(clients.ec2, ids=fleet.spot))


def test_a_target_outside_the_tagged_nodes_is_refused(clients, fleet, proxy, tmp_path, capsys):
    stray = clients.ec2.run_instances(ImageId=clients.ec2.describe_images()["Images"][0]["ImageId"],
                                      MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    proxy.clear()
    assert gameday(proxy, tmp_path / "state", "terminate-instance", "--target", stray, "--gameday") == 2
    assert "not live nodes of the targeted job/tags" in capsys.readouterr().err
    assert proxy.mutating() == []


def test_an_alarm_already_in_alarm_stops_the_game_day_before_it_starts(clients, fleet, proxy, tmp_path, capsys):
    clients.cloudwatch.put_metric_alarm(AlarmName="gpu-health", MetricName="x", Namespace="n", Statistic="Sum",
                                        Period=60, EvaluationPeriods=1, Threshold=1,
                                        ComparisonOperator="GreaterThanThreshold")
    clients.cloudwatch.set_alarm_state(AlarmName="gpu-health", StateValue="ALARM", StateReason="test")
    proxy.clear()
    code = gameday(proxy, tmp_path / "state", "terminate-instance", "--stop-alarm", "gpu-health", "--gameday")
    assert code == 2
    assert "CloudWatch alarm gpu-health is in ALARM" in capsys.readouterr().err
    assert proxy.mutating() == []


def test_the_audit_log_holds_every_destructive_call_made_at_the_server(clients, direct, fleet, proxy, tmp_path,
                                                                       capsys):
    state = tmp_path / "state"
    proxy.clear()
    with FisEffect(direct.fis, direct.ec2):
        code = gameday(proxy, state, "spot-interruption", "--gameday", "--poll", "0.2",
                       "--replacement-timeout", "30", "--report-dir", str(tmp_path / "report"))
    assert code == 0, capsys.readouterr()
    audit = [json.loads(line) for line in (state / "audit.jsonl").read_text().splitlines()]
    made = proxy.mutating()
    rest = {"POST /experimentTemplates": "CreateExperimentTemplate", "POST /experiments": "StartExperiment"}
    names = [rest.get(s.operation) or ("DeleteExperimentTemplate" if s.operation.startswith("DELETE ")
                                       else s.operation) for s in made]
    results = [e for e in audit if e["phase"] == "result"]
    assert [e["operation"] for e in results] == names == [
        "CreateExperimentTemplate", "StartExperiment", "DeleteExperimentTemplate"]
    attempts = [e for e in audit if e["phase"] == "attempt"]
    assert [e["operation"] for e in attempts] == names
    for e in audit:
        assert e["run"].startswith("gameday-") and e["t"] > 0 and e["target"]
    assert all(e["result"] == "ok" for e in results)
    report = json.loads((tmp_path / "report" / "gameday.json").read_text())
    assert report["passed"] and report["replacement"]["provision_s"] is not None


def test_gameday_help_explains_the_safety_model_with_an_example(capsys):
    with pytest.raises(SystemExit) as done:
        main(["gameday", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for words in ("safety model", "--gameday", "--dry-run", "blast radius", "--max-percent", "--stop-alarm",
                  "audit.jsonl", "cleanup-journal.jsonl", "elastic-chaos cleanup", "examples:",
                  "elastic-chaos gameday spot-interruption --job"):
        assert words in out, words


def test_the_deadline_stops_the_wait_for_a_replacement_that_never_comes(clients, proxy, tmp_path, capsys):
    image = clients.ec2.describe_images()["Images"][0]["ImageId"]
    clients.ec2.run_instances(ImageId=image, MinCount=2, MaxCount=2, InstanceMarketOptions={"MarketType": "spot"},
                              TagSpecifications=[{"ResourceType": "instance", "Tags": [
                                  {"Key": "eks:cluster-name", "Value": "gameday"},
                                  {"Key": "eks:nodegroup-name", "Value": "gpu-spot"}]}])   # no group replaces them
    code = gameday(proxy, tmp_path / "state", "terminate-instance", "--gameday", "--deadline", "3",
                   "--report-dir", str(tmp_path / "report"))
    out = capsys.readouterr().out
    assert code == 1
    assert "stopped: the deadline passed (3s)" in out
    report = json.loads((tmp_path / "report" / "gameday.json").read_text())
    assert report["passed"] is False and report["replacement"]["provision_s"] is None
