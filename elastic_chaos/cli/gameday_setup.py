"""Build what ``elastic-chaos gameday`` runs on from its flags: Guard, AWS side, platform.

With ``--job``/``--selector`` the platform is ``eks`` attached to the running
job (Kubernetes and AWS); with ``--tag`` only, it is ``ec2`` (AWS only). The
Guard is dry (``--dry-run``), armed (``--gameday``) or neither; its audit log
and cleanup journal live in ``--state-dir`` so later runs find them.
"""
from __future__ import annotations

import argparse
import contextlib
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elastic_chaos.errors import FaultUnavailable, PlatformError, SpecError
from elastic_chaos.events import Timeline
from elastic_chaos.faults.api import Fault
from elastic_chaos.gameday.runner import LINK_FAULTS, GamedayOptions, make_fault
from elastic_chaos.gameday.stops import pods_failed
from elastic_chaos.options import given
from elastic_chaos.platforms.api import Platform
from elastic_chaos.platforms.aws.clients import make_clients
from elastic_chaos.platforms.aws.guard import AuditLog, CleanupJournal, Guard, SafetyLimits
from elastic_chaos.platforms.aws.links import fis_links_missing
from elastic_chaos.platforms.aws.targets import AwsSide

if TYPE_CHECKING:
    from elastic_chaos.platforms.aws.eks import EksOptions

AUDIT_FILE = "audit.jsonl"
JOURNAL_FILE = "cleanup-journal.jsonl"


def report_dir(args: argparse.Namespace) -> Path:
    return args.report_dir or Path("reports") / f"gameday-{args.fault}-{time.strftime('%Y%m%d-%H%M%S')}"


def make_guard(args: argparse.Namespace, run_id: str) -> Guard:
    state = args.state_dir
    return Guard(dry_run=args.dry_run, armed=args.gameday, audit=AuditLog(state / AUDIT_FILE, run_id),
                 journal=CleanupJournal(state / JOURNAL_FILE, run_id))


def make_gameday_fault(args: argparse.Namespace) -> Fault:
    """The fault the flags ask for, its options checked (SpecError). A link fault is checked
    further, before anything is contacted: it needs a job, the three settings FIS's pod actions
    need (FaultUnavailable naming the missing ones), and a --duration FIS's own outlasts."""
    link = args.fault in LINK_FAULTS
    aws_fault = args.fault in ("spot-interruption", "terminate-instance", "insufficient-capacity")
    from elastic_chaos.faults.network import Latency, PacketLoss
    link_values = {**given(args, Latency), **given(args, PacketLoss)} if link else {}
    fault = make_fault(args.fault, count=args.count, targets=tuple(args.target), notice_s=args.notice,
                       duration_s=args.duration, poll_s=args.poll, timeout_s=args.deadline if aws_fault else None,
                       pod=args.target[0] if args.target else None,
                       node=args.target[0] if link and args.target else None, **link_values)
    if link:
        if not (args.job or args.selector):
            raise SpecError(f"{args.fault} degrades a pod's link: name the job with --job (or --selector)")
        missing = fis_links_missing(args.eks_cluster, args.fis_service_account, args.fis_role_arn)
        if missing:
            raise FaultUnavailable(missing)
        from elastic_chaos.platforms.aws.actions import pod_network_parameters
        shape = fault.shape() if isinstance(fault, (Latency, PacketLoss)) else {}
        pod_network_parameters(loss=shape.get("loss", 0.0), delay_ms=shape.get("delay_ms"),
                               jitter_ms=shape.get("jitter_ms", 0.0))   # whole numbers, as FIS takes them
        if args.duration > args.fis_link_duration:
            raise SpecError(f"--duration {args.duration:g} is longer than --fis-link-duration "
                            f"{args.fis_link_duration:g}: FIS would end the experiment first")
    return fault


@contextlib.contextmanager
def session(args: argparse.Namespace, tags: dict[str, str], fault: Fault
            ) -> Iterator[tuple[Platform, AwsSide, GamedayOptions]]:
    """(platform, AWS side, options) for one game day of ``fault`` (make_gameday_fault);
    detaches from the job on exit."""
    run_id = f"gameday-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    limits = SafetyLimits(max_nodes=args.max_nodes, max_percent=args.max_percent)
    clients = make_clients(region=args.region, endpoint_url=args.endpoint_url, profile=args.profile)
    side = AwsSide(clients, make_guard(args, run_id), run_id=run_id, limits=limits, tags=tags,
                   fis_role_arn=args.fis_role_arn, stop_alarm=args.stop_alarm)
    report = None if args.dry_run else report_dir(args)
    work = report or args.state_dir / "scratch"
    timeline = Timeline()
    common: dict[str, Any] = {"fault": fault, "deadline_s": args.deadline, "poll_s": args.poll,
                              "replacement_timeout_s": args.replacement_timeout, "report_dir": report,
                              "expect_replacement": args.fault in ("spot-interruption", "terminate-instance"),
                              "hold_s": args.duration if args.fault in LINK_FAULTS else 0.0}
    if args.etcd:
        from elastic_chaos.watchers.rendezvous import RendezvousWatcher
        rdzv_id = args.run_id or args.job
        if not rdzv_id:
            raise SpecError("--etcd needs --run-id (the job's rendezvous id) or --job")
        common["rendezvous"] = lambda tl: RendezvousWatcher(tl, args.etcd, rdzv_id, lambda: {})
    if not (args.job or args.selector):
        if args.fault in ("delete-pod", "drain-node", *LINK_FAULTS):
            raise SpecError(f"{args.fault} is a Kubernetes fault: name the job with --job (or --selector)")
        from elastic_chaos.platforms.aws.ec2 import Ec2Platform
        yield Ec2Platform(timeline, work, aws_side=side), side, GamedayOptions(**common)
        return
    platform = _eks(args, side, timeline, work)
    try:
        selector = args.selector or job_selector(platform.custom, args.namespace, args.job)
        platform.attach(selector)
        if not platform.alive_nodes():
            raise SpecError(f"no running worker pod matches {selector!r} in namespace {args.namespace}: "
                            "check --job/--selector and --namespace")
        yield platform, side, GamedayOptions(job_failed=pods_failed(platform), core_v1=platform.core, **common)
    finally:
        platform.detach()


def eks_options(args: argparse.Namespace, side: AwsSide) -> EksOptions:
    """The eks platform's options from the game day's flags (builds nothing, reads nothing)."""
    from elastic_chaos.platforms.aws.eks import EksOptions
    from elastic_chaos.platforms.kubernetes.manifests import KubeSettings
    return EksOptions(kubeconfig=args.kubeconfig, context=args.kube_context,
                      settings=KubeSettings(namespace=args.namespace), region=side.clients.region,
                      limits=side.limits, tags=tuple(side.tags.items()), fis_role_arn=side.fis_role_arn,
                      stop_alarm=side.stop_alarm, cluster=args.eks_cluster,
                      fis_service_account=args.fis_service_account, fis_link_duration_s=args.fis_link_duration)


def _eks(args: argparse.Namespace, side: AwsSide, timeline: Timeline, work: Any) -> Any:
    from elastic_chaos.platforms.aws.eks import EksPlatform
    return EksPlatform(timeline, work, eks_options(args, side), aws_side=side)


def job_selector(custom: Any, namespace: str, name: str) -> str:
    """The label selector of a job's worker pods: ElasticJob (TorchElastic controller),
    PyTorchJob (Kubeflow training operator), or a StatefulSet (the statefulset job kind:
    ``<name>-worker``, or one named ``name``: its own selector). SpecError when there is none."""
    from elastic_chaos.platforms.kubernetes.watch import api_message, api_status
    kinds = (("elastic.pytorch.org", "v1alpha1", "elasticjobs", name, f"job-name={name}"),
             ("kubeflow.org", "v1", "pytorchjobs", name,
              f"training.kubeflow.org/job-name={name},training.kubeflow.org/replica-type=worker"),
             ("apps", "v1", "statefulsets", f"{name}-worker", None),
             ("apps", "v1", "statefulsets", name, None))
    for group, version, plural, obj_name, selector in kinds:
        try:
            obj = custom.get_namespaced_custom_object(group, version, namespace, plural, obj_name)
        except Exception as exc:  # noqa: BLE001 - the client's ApiException, judged by status
            if api_status(exc) == 404:
                continue
            raise PlatformError(f"reading {plural}.{group} {namespace}/{obj_name}: {api_message(exc)}") from exc
        if selector is None:
            labels = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        return selector
    raise SpecError(f"no ElasticJob, PyTorchJob or StatefulSet named {name} (or {name}-worker) in namespace "
                    f"{namespace}; or pass --selector with its worker pods' labels")
