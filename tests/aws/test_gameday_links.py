"""Link faults through `elastic-chaos gameday`: the flags, the checks made before any call, the
dry run listing FIS's calls, and a whole game day of a latency fault against the moto server.

There is no kube-apiserver in the aws tests: the game day's eks platform is played by
``AttachedPods`` (test_eks_links.Pods, attached to a job), built from the very EksOptions the
game day's flags make (gameday_setup.eks_options), with the real FisLinks and Guard on it."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from aws_fleet import FIS_ROLE, REGION
from test_eks_links import JOB, Pods

from elastic_chaos.cli import gameday_setup
from elastic_chaos.cli.main import main
from elastic_chaos.platforms.aws.actions import FisPods
from elastic_chaos.platforms.aws.eks import single_pod_selector
from elastic_chaos.platforms.aws.guard import CleanupJournal, PodScope

LINK = ["--selector", JOB, "--namespace", "training", "--between", "bert-worker-0", "bert-worker-1"]
FIS = ["--eks-cluster", "gameday", "--fis-service-account", "fis-pod-actions", "--fis-role-arn", FIS_ROLE]


@dataclass
class AttachedPods(Pods):
    """The job's worker pods as the game day's eks platform (attach, detach, no Kubernetes client)."""

    core: Any = None
    custom: Any = None
    selector: str | None = None

    def attach(self, selector: str) -> None:
        self.selector = selector

    def detach(self) -> None:
        return None

    def replacement_pending(self) -> bool:
        return False

    def fis_pods(self, node: str) -> tuple[FisPods, PodScope]:
        job, ns = str(self.selector), self.eks_options.settings.namespace
        selector = single_pod_selector(job, {"training.kubeflow.org/replica-index": node.rsplit("-", 1)[-1]})
        assert selector is not None
        return FisPods(str(self.eks_options.cluster), ns, selector), PodScope(ns, job)


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[AttachedPods]:
    """The stand-in platforms the game day built from its flags (none: it stopped before)."""
    built: list[AttachedPods] = []

    def eks(args: Any, side: Any, timeline: Any, work: Any) -> AttachedPods:
        built.append(AttachedPods(side, eks_options=gameday_setup.eks_options(args, side), timeline=timeline))
        return built[-1]

    monkeypatch.setattr(gameday_setup, "_eks", eks)
    return built


@pytest.fixture
def running_until_stopped(moto):
    """moto's FIS experiments advance one state per three reads (never past running unless stopped)."""
    moto.transition("fis::experiment", {"progression": "manual", "times": 3})
    yield
    moto.transition("fis::experiment", None)


def gameday(proxy, state, *extra):
    return main(["gameday", *extra, "--region", REGION, "--endpoint-url", proxy.endpoint,
                 "--state-dir", str(state)])


def test_a_latency_dry_run_lists_the_fis_calls_from_the_flags_and_makes_none(clients, proxy, made, tmp_path, capsys):
    proxy.clear()
    code = gameday(proxy, tmp_path / "state", "latency", *LINK, *FIS, "--delay-ms", "20", "--jitter-ms", "5",
                   "--duration", "60", "--fis-link-duration", "900", "--dry-run")
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert proxy.mutating() == []
    for op in ("CreateExperimentTemplate", "StartExperiment", "StopExperiment", "DeleteExperimentTemplate"):
        assert f"would call fis:{op}" in out, op
    create = next(line for line in out.splitlines() if "would call fis:CreateExperimentTemplate" in line)
    for words in ('"actionId": "aws:eks:pod-network-latency"', '"clusterIdentifier": "gameday"',
                  '"delayMilliseconds": "20"', '"jitterMilliseconds": "5"', '"duration": "PT15M"',
                  '"kubernetesServiceAccount": "fis-pod-actions"', '"sources": "10.0.1.11/32"',
                  '"namespace": "training"', f'{JOB},training.kubeflow.org/replica-index=0'):
        assert words in create, words
    assert clients.fis.list_experiment_templates()["experimentTemplates"] == []
    assert not (tmp_path / "state" / "audit.jsonl").exists()
    # the plan is FIS's, not the local platforms' rules and probe (LinkDegrader.plan_steps)
    assert "ask AWS FIS to delay every packet 20 ms +- 5 ms (aws:eks:pod-network-latency)" in out
    assert "nothing probes the link on EKS" in out and "NFQUEUE" not in out and "probe the link" not in out


def test_a_link_fault_without_the_eks_cluster_is_a_usage_error_before_any_call(proxy, made, tmp_path, capsys):
    proxy.clear()
    code = gameday(proxy, tmp_path / "state", "packet-loss", *LINK, "--rate", "0.05", "--fis-service-account",
                   "fis-pod-actions", "--fis-role-arn", FIS_ROLE, "--gameday")
    err = capsys.readouterr().err
    assert code == 2
    assert "need the EKS cluster's name or ARN (EksOptions.cluster, --eks-cluster)" in err, err
    assert "service account" not in err and "Traceback" not in err
    assert proxy.operations() == [] and made == []     # no AWS call, no Kubernetes platform built


def test_a_negative_delay_is_refused_by_the_parser_before_any_call(proxy, made, tmp_path, capsys):
    proxy.clear()
    with pytest.raises(SystemExit) as refused:
        gameday(proxy, tmp_path / "state", "latency", *LINK, *FIS, "--delay-ms=-5", "--dry-run")
    assert refused.value.code == 2
    assert "argument --delay-ms: -5: must be a finite number > 0" in capsys.readouterr().err
    assert proxy.operations() == [] and made == []


def test_a_jitter_above_the_delay_is_a_usage_error_before_any_call(proxy, made, tmp_path, capsys):
    proxy.clear()
    code = gameday(proxy, tmp_path / "state", "latency", *LINK, *FIS, "--delay-ms", "20", "--jitter-ms", "30",
                   "--dry-run")
    err = capsys.readouterr().err
    assert code == 2 and "--jitter-ms 30 is more than --delay-ms 20" in err and "Traceback" not in err
    assert proxy.operations() == [] and made == []


def test_a_loss_fis_cannot_take_as_a_whole_percentage_is_refused_before_any_call(proxy, made, tmp_path, capsys):
    proxy.clear()
    code = gameday(proxy, tmp_path / "state", "packet-loss", *LINK, *FIS, "--rate", "0.055", "--dry-run")
    assert code == 2
    assert "FIS takes the loss as a percentage as a whole number; 5.5 is not one" in capsys.readouterr().err
    assert proxy.operations() == [] and made == []


def test_a_duration_past_the_fis_actions_own_is_refused_before_any_call(proxy, made, tmp_path, capsys):
    proxy.clear()
    code = gameday(proxy, tmp_path / "state", "latency", *LINK, *FIS, "--duration", "1200",
                   "--fis-link-duration", "900", "--dry-run")
    assert code == 2
    assert "--duration 1200 is longer than --fis-link-duration 900" in capsys.readouterr().err
    assert proxy.operations() == [] and made == []


def test_a_latency_game_day_creates_starts_holds_stops_and_deletes_its_experiment(
        clients, proxy, made, tmp_path, capsys, running_until_stopped):
    state = tmp_path / "state"
    proxy.clear()
    code = gameday(proxy, state, "latency", *LINK, *FIS, "--delay-ms", "20", "--duration", "1", "--poll", "0.2",
                   "--gameday", "--report-dir", str(tmp_path / "report"))
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "holding latency for 1s" in out
    audit = [json.loads(line) for line in (state / "audit.jsonl").read_text().splitlines()]
    assert [e["operation"] for e in audit if e["phase"] == "result"] == [
        "CreateExperimentTemplate", "StartExperiment", "StopExperiment", "DeleteExperimentTemplate"]
    assert CleanupJournal(state / "cleanup-journal.jsonl", "test").pending() == []
    assert clients.fis.list_experiment_templates()["experimentTemplates"] == []
    assert [e["state"]["status"] for e in clients.fis.list_experiments()["experiments"]] == ["stopped"]
    report = json.loads((tmp_path / "report" / "gameday.json").read_text())
    assert report["passed"] and report["record"]["asked_of"] == "AWS FIS"
    assert report["record"]["delay_ms"] == 20.0 and report["record"]["peers"] == ["bert-worker-1"]
    assert made[0].eks_options.fis_link_duration_s == 3600.0


def test_gameday_help_shows_the_link_faults_their_flags_and_an_example(capsys):
    with pytest.raises(SystemExit) as done:
        main(["gameday", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for words in ("latency | packet-loss", "aws:eks:pod-network-latency", "--eks-cluster NAME_OR_ARN",
                  "--fis-service-account NAME", "--fis-link-duration SECONDS", "--delay-ms X", "--jitter-ms X",
                  "--rate X", "--between NODE", "elastic-chaos gameday latency --job"):
        assert words in out, words


@pytest.mark.parametrize("fault, flags, words", [
    ("latency", ("--delay-ms", "20", "--reverse-delay-ms", "5"), "a delay set per direction"),
    ("packet-loss", ("--rate", "0.05", "--burst", "4"), "a bursty loss (--burst"),
])
def test_a_per_direction_delay_or_a_bursty_loss_is_refused_with_where_to_make_it_before_any_call(
        proxy, made, tmp_path, capsys, fault, flags, words):
    proxy.clear()
    code = gameday(proxy, tmp_path / "state", fault, *LINK, *FIS, *flags, "--dry-run")
    out, err = capsys.readouterr()
    assert code == 2 and words in err and "Traceback" not in err, err
    assert "--platform local" in err and "make cluster-up" in err
    assert "step:" not in out      # no plan of the local platforms' rules printed as if FIS made them
    assert proxy.operations() == []
