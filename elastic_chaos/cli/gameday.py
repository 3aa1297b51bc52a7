"""``elastic-chaos gameday FAULT``: a real fault on a real EKS cluster, safely."""
from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_chaos.errors import SpecError
from elastic_chaos.options import DAY_S, MAX_NODES, add_arguments, declared, given, option, validate


@dataclass(frozen=True)
class Numbers:
    """A game day's numbers, each with its range (checked before anything is contacted)."""

    count: int = option(1, "nodes to hit", minimum=1, maximum=MAX_NODES)
    max_nodes: int = option(1, "blast radius: most nodes per fault", minimum=1, maximum=MAX_NODES)
    max_percent: float = option(50.0, "blast radius: most percent of the job's nodes per fault", above=0,
                                maximum=100)
    deadline: float = option(1800.0, "stop after this many seconds", above=0, maximum=DAY_S, units="s")
    notice: float = option(120.0, "spot-interruption: seconds from start to interruption (FIS takes 120..900)",
                           minimum=0, maximum=900, units="s")
    duration: float = option(600.0, "insufficient-capacity: seconds without capacity; latency, packet-loss: "
                                    "seconds the link stays degraded", above=0, maximum=DAY_S, units="s")
    replacement_timeout: float = option(900.0, "seconds to wait for the replacement to join", above=0,
                                        maximum=DAY_S, units="s")
    poll: float = option(5.0, "poll interval in seconds", above=0, maximum=3600, units="s")
    fis_link_duration: float = option(3600.0, "latency, packet-loss: the FIS action's own duration, the longest "
                                              "the link stays degraded should this process die (at least "
                                              "--duration)", above=0, maximum=DAY_S, units="s")

    def __post_init__(self) -> None:
        validate(self)

DESCRIPTION = """Inject one real fault into a running elastic job on EKS -- a FIS spot
interruption, an EC2 termination, an ASG with no capacity, a pod deletion, a
node drain, or a slow or lossy link of one worker pod -- watch the replacement
arrive and report how long each hand took (provision: instance running, join:
node Ready, rendezvous: job re-formed).

FAULT: spot-interruption | terminate-instance | insufficient-capacity | delete-pod | drain-node |
       latency | packet-loss

link faults   latency (--delay-ms, --jitter-ms) and packet-loss (--rate) are AWS FIS
              experiments (aws:eks:pod-network-latency / -packet-loss) on one worker
              pod of the job (--target or the first of --between; default the newest),
              for its traffic with its peers' pod IPs (--between NODE PEER...; default
              every other worker), held --duration seconds, then stopped and deleted.
              They need --eks-cluster, --fis-service-account and --fis-role-arn
              (docs/EKS.md, "Link faults"); FIS makes them, nothing here measures them.

safety model (a game day must never hurt what it was not aimed at):
  opt-in        nothing destructive happens without --gameday; without it the
                plan is printed and the command exits 2.
  dry run       --dry-run resolves every target and prints every AWS/Kubernetes
                call the fault would make, walking the same code path, and makes
                none (reads only: DescribeInstances, list pods, ...).
  targeting     only the nodes of the job you name (--job/--selector), narrowed by
                --tag KEY=VALUE; without a job, only instances carrying every
                --tag (never "all instances"). --target names must be among them.
  blast radius  --max-nodes (default 1) and --max-percent of the job's nodes
                (default 50) are checked before any destructive call.
  stop          the game day stops (FIS experiment stopped, rollbacks done) when
                the job has failed for good, when --deadline passes, or when the
                CloudWatch alarm --stop-alarm is in ALARM (also FIS's own stop
                condition, so AWS stops the experiment even if this process dies).
  audit         every destructive call is appended to <state-dir>/audit.jsonl
                before and after it is made (what, target, when, result).
  cleanup       rollbacks owed (delete FIS template, stop experiment, uncordon)
                go to <state-dir>/cleanup-journal.jsonl first; after a crash the
                next game day, or `elastic-chaos cleanup`, finishes them.

examples:
  # look first: which node, which calls
  elastic-chaos gameday spot-interruption --job bert-large --namespace training \\
      --tag eks:nodegroup-name=gpu-spot --region us-west-2 \\
      --fis-role-arn arn:aws:iam::111122223333:role/elastic-chaos-fis --dry-run
  # then for real, stopping if the training-health alarm fires
  elastic-chaos gameday spot-interruption --job bert-large --namespace training \\
      --tag eks:nodegroup-name=gpu-spot --region us-west-2 \\
      --fis-role-arn arn:aws:iam::111122223333:role/elastic-chaos-fis \\
      --stop-alarm training-loss-nan --etcd 127.0.0.1:2379 --run-id bert-large --gameday
  # 50 ms (+- 10) on one worker's traffic with its peers for 5 minutes, through FIS
  elastic-chaos gameday latency --job bert-large --namespace training --delay-ms 50 --jitter-ms 10 \\
      --duration 300 --eks-cluster gpu --fis-service-account fis-pod-actions \\
      --fis-role-arn arn:aws:iam::111122223333:role/elastic-chaos-fis --region us-west-2 --dry-run
  # no Kubernetes access: aim by tags only
  elastic-chaos gameday terminate-instance --tag eks:cluster-name=gpu --tag eks:nodegroup-name=gpu-spot \\
      --max-percent 25 --gameday

exit codes: 0 the job got through (and its replacement joined, where one was
expected), 1 it did not or a stop condition fired, 2 usage error or refused.
"""


def register(sub: Any) -> None:
    p = sub.add_parser("gameday", help="a real fault on a real EKS cluster (opt-in, dry run, blast radius, audit)",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("fault", metavar="FAULT", help="the fault (see above)")
    t = p.add_argument_group("targets")
    t.add_argument("--job", help="the ElasticJob/PyTorchJob whose nodes may be hit")
    t.add_argument("--namespace", default="default", help="its namespace (default: default)")
    t.add_argument("--selector", help="label selector of the job's worker pods (instead of --job)")
    t.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE",
                   help="only instances carrying this tag (repeatable; VALUE * = any)")
    t.add_argument("--target", action="append", default=[], metavar="NODE",
                   help="hit this node (Kubernetes node or instance id) instead of the newest (repeatable)")
    add_arguments(t, Numbers, skip=("max_nodes", "max_percent", "deadline", "notice", "duration",
                                    "replacement_timeout", "poll", "fis_link_duration"))
    s = p.add_argument_group("safety")
    mode = s.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print targets and calls; change nothing")
    mode.add_argument("--gameday", action="store_true", help="really do it (destructive)")
    add_arguments(s, Numbers, skip=("count", "notice", "duration", "replacement_timeout", "poll",
                                    "fis_link_duration"))
    s.add_argument("--stop-alarm", metavar="NAME", help="stop when this CloudWatch alarm is in ALARM")
    s.add_argument("--state-dir", type=Path, default=default_state_dir(),
                   help="audit log and cleanup journal folder (default $ELASTIC_CHAOS_STATE or ~/.elastic-chaos)")
    a = p.add_argument_group("aws")
    a.add_argument("--region", help="AWS region (default: AWS_REGION / the profile's)")
    a.add_argument("--profile", help="AWS profile")
    a.add_argument("--endpoint-url", help="send AWS calls here (a test server); default AWS")
    a.add_argument("--fis-role-arn", help="IAM role FIS assumes (spot-interruption, insufficient-capacity, "
                                          "latency, packet-loss)")
    a.add_argument("--eks-cluster", metavar="NAME_OR_ARN",
                   help="the EKS cluster's name or ARN: FIS's pod actions aim at pods in it (latency, packet-loss)")
    a.add_argument("--fis-service-account", metavar="NAME",
                   help="the Kubernetes service account in --namespace FIS acts as for its pod actions "
                        "(latency, packet-loss; its Role: docs/EKS.md, 'Link faults')")
    add_arguments(a, Numbers, skip=[d.key for d in declared(Numbers) if d.key != "fis_link_duration"])
    f = p.add_argument_group("fault")
    add_arguments(f, Numbers, skip=("count", "max_nodes", "max_percent", "deadline", "fis_link_duration"))
    from elastic_chaos.faults.network import Latency, PacketLoss
    links = p.add_argument_group("link faults (latency, packet-loss)")
    add_arguments(links, Latency, skip=("duration_s", "to_store"))
    add_arguments(links, PacketLoss, skip=("duration_s", "to_store", "between"))
    k = p.add_argument_group("kubernetes and rendezvous")
    k.add_argument("--kubeconfig", help="kubeconfig (default $KUBECONFIG, ~/.kube/config, in-cluster)")
    k.add_argument("--kube-context", help="kubeconfig context")
    k.add_argument("--etcd", metavar="HOST:PORT", help="the job's rendezvous etcd, to time the rendezvous")
    k.add_argument("--run-id", help="the job's rendezvous id (with --etcd; default: --job)")
    p.add_argument("--report-dir", type=Path, help="report folder (default reports/gameday-<fault>-<time>)")
    from elastic_chaos.cli import pushgateway
    pushgateway.add_flag(p)
    p.set_defaults(func=main)


def default_state_dir() -> Path:
    return Path(os.environ.get("ELASTIC_CHAOS_STATE") or Path.home() / ".elastic-chaos")


def parse_tags(raw: list[str]) -> dict[str, str]:
    tags = {}
    for item in raw:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError(f"--tag {item!r} is not KEY=VALUE (e.g. --tag eks:nodegroup-name=gpu-spot)")
        tags[key] = value
    return tags


def main(args: argparse.Namespace) -> int:
    from elastic_chaos.gameday.runner import GAMEDAY_FAULTS
    for key, value in dataclasses.asdict(Numbers(**given(args, Numbers))).items():
        setattr(args, key, value)   # each checked against its range, the defaults filled in
    if args.fault not in GAMEDAY_FAULTS:
        raise SpecError(f"unknown game-day fault {args.fault!r}; choose one of {', '.join(GAMEDAY_FAULTS)}")
    if not (args.job or args.selector or args.tag):
        raise SpecError("say what may be hit: --job NAME (or --selector LABELS) and/or --tag KEY=VALUE")
    from elastic_chaos.cli import gameday_setup
    fault = gameday_setup.make_gameday_fault(args)   # its options checked before anything is contacted
    from elastic_chaos.cli.pushgateway import preflight
    preflight(args.pushgateway)
    with gameday_setup.session(args, parse_tags(args.tag), fault) as (platform, side, opts):
        from elastic_chaos.gameday.runner import run_gameday
        result = run_gameday(platform, side, opts)
    for reason in result.reasons:
        print(f"  {reason}")
    if opts.report_dir is not None and not side.guard.dry_run:
        print(f"report folder: {opts.report_dir}  (gameday.json, timeline.jsonl, metrics.prom); audit: "
              f"{side.guard.audit.path}" if side.guard.audit else f"report folder: {opts.report_dir}")
        if not _metrics(opts.report_dir, result.events, args.pushgateway):
            return 2
    return result.code


def _metrics(folder: Path, events: list[Any], gateway: str | None) -> bool:
    """metrics.prom in the game day's folder, from its timeline in memory, pushed to ``gateway`` when
    given; False when the push failed."""
    from elastic_chaos.analysis.result import result_of_timeline
    from elastic_chaos.cli.pushgateway import push_report
    from elastic_chaos.reporting.run_report import RunReport
    from elastic_chaos.reporting.views.prometheus import write_metrics
    if not events:
        return True
    report = RunReport(folder, result_of_timeline(events), events)
    write_metrics(report)
    return push_report(report, gateway)
