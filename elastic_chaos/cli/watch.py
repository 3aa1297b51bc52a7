"""``elastic-chaos watch``: a live, read-only view of a running elastic job's rendezvous.

Shows every rendezvous change (round, participants, waiting nodes, world
size) and, with ``--logs DIR`` (the folder of the job's node logs), training
progress. Injects nothing and writes nothing to etcd. ``--record DIR`` writes
the same timeline.jsonl a scenario writes, and report.json / report.html at
the end, so a real interruption can be audited passively (losses are
observed, see docs/REPORTS.md). With ``--platform kubernetes --job NAME`` the
rendezvous is found from the ElasticJob/PyTorchJob object and its etcd reached
through ``kubectl port-forward`` (or ``--etcd``). Stops after ``--duration``
seconds or on Ctrl-C, stopping everything it started.

A rendezvous value that cannot be decoded is shown and recorded, and the
watch goes on; a watcher that dies ends the watch (it would be blind).

Exit 0 when every observed loss was followed by a re-formed rendezvous (and
regained progress, where visible), 1 when one was not or a watcher died, 2 on
a usage or setup error (etcd unreachable, bad option).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from elastic_chaos.errors import SpecError
from elastic_chaos.events import ProgressEv, first


def register(sub: Any) -> None:
    p = sub.add_parser("watch", help="live view of a running job's rendezvous (read-only); --record to audit",
                       description=__doc__ + "\nexamples:\n"
                       "  elastic-chaos watch --etcd 127.0.0.1:2379 --run-id my-job --duration 600\n"
                       "  elastic-chaos watch --etcd etcd:2379 --run-id my-job --logs /shared/logs "
                       "--record reports/prod-incident\n"
                       "  elastic-chaos watch --platform kubernetes --job my-job --namespace training "
                       "--record reports/spot-day\n",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--etcd", metavar="HOST:PORT", help="the job's rendezvous etcd (torchrun --rdzv-endpoint); "
                   "with --platform kubernetes: reach its etcd here instead of a kubectl port-forward")
    p.add_argument("--run-id", metavar="ID", help="the job's rendezvous id (torchrun --rdzv-id)")
    p.add_argument("--platform", choices=["etcd", "kubernetes"], default="etcd",
                   help="etcd (default): watch --etcd directly; kubernetes: find the job by --job NAME")
    k = p.add_argument_group("kubernetes (--platform kubernetes)")
    k.add_argument("--job", metavar="NAME", help="the ElasticJob or PyTorchJob to watch")
    k.add_argument("--namespace", default="default", help="its namespace (default: default)")
    k.add_argument("--kubeconfig", help="kubeconfig file (default $KUBECONFIG, ~/.kube/config, in-cluster)")
    k.add_argument("--kube-context", help="kubeconfig context")
    k.add_argument("--kubectl", default="kubectl", help="kubectl for the etcd port-forward (default: kubectl)")
    p.add_argument("--logs", type=Path, metavar="DIR", help="folder of the job's node logs (<node>.log) "
                   "to follow for training progress")
    p.add_argument("--record", type=Path, metavar="DIR", help="write timeline.jsonl, report.json and "
                   "report.html into DIR")
    from elastic_chaos.cli.watching import WatchOptions
    from elastic_chaos.options import add_arguments
    add_arguments(p, WatchOptions)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if args.platform == "kubernetes":
        return _watch_kubernetes(args)
    if not args.etcd or not args.run_id:
        raise SpecError("watch needs --etcd HOST:PORT and --run-id ID (torchrun's --rdzv-endpoint and "
                        "--rdzv-id of the job), or --platform kubernetes --job NAME")
    return _watch(args, args.etcd, args.run_id, "etcd")


def _watch_kubernetes(args: argparse.Namespace) -> int:
    from elastic_chaos.platforms.kubernetes import discover
    if not args.job:
        raise SpecError("--platform kubernetes needs --job NAME (the ElasticJob or PyTorchJob to watch)")
    rdzv = discover.locate(discover.custom_objects_api(args.kubeconfig, args.kube_context), args.namespace,
                           args.job)
    if args.run_id and args.run_id != rdzv.run_id:
        raise SpecError(f"--run-id {args.run_id} contradicts {rdzv.kind} {args.job}'s rendezvous id {rdzv.run_id}")
    print(f"{rdzv.kind} {rdzv.namespace}/{rdzv.name}: rendezvous '{rdzv.run_id}' at {rdzv.host}:{rdzv.port} "
          f"({rdzv.backend})")
    with discover.etcd_endpoint(rdzv, explicit=args.etcd, kubectl=args.kubectl, kubeconfig=args.kubeconfig,
                                context=args.kube_context, log_dir=args.record) as endpoint:
        return _watch(args, endpoint, rdzv.run_id, "kubernetes")


def _watch(args: argparse.Namespace, endpoint: str, run_id: str, platform: str) -> int:
    from elastic_chaos.analysis.result import result_of_timeline, watch_verdict
    from elastic_chaos.cli.watching import WatchOptions, watch
    opts = WatchOptions(etcd=endpoint, run_id=run_id, record=args.record, duration_s=getattr(args, "duration_s", None),
                        logs=args.logs, platform=platform)
    if args.record is not None:
        args.record.mkdir(parents=True, exist_ok=True)
    result = watch(opts)
    if result.record is not None:
        print(f"\nrecorded: {result.record / 'timeline.jsonl'}")
        if result.report_html is not None:
            print(f"report: {result.report_html.resolve()}")
    saw_progress = first(result.events, ProgressEv.STEP) is not None
    verdict = watch_verdict(result_of_timeline(result.events).recoveries, saw_progress, result.errors)
    for reason in verdict.reasons:
        print(f"  {reason}")
    return 0 if verdict.passed else 1
