"""``elastic-chaos watch``: a live, read-only view of a running elastic job's rendezvous.

Shows every rendezvous change (round, participants, waiting nodes, world
size) and, with ``--logs DIR`` (the folder of the job's node logs), training
progress. Injects nothing and writes nothing to etcd. ``--record DIR`` writes
the same timeline.jsonl a scenario writes, and report.json / report.html at
the end, so a real interruption can be audited passively (losses are
observed, see docs/REPORTS.md). Stops after ``--duration`` seconds or on
Ctrl-C, stopping everything it started.

Exit 0 when every observed loss was followed by a re-formed rendezvous (and
regained progress, where visible), 1 when one was not, 2 on a usage or setup
error (etcd unreachable, bad option).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from chaos.errors import SpecError


def register(sub: Any) -> None:
    p = sub.add_parser("watch", help="live view of a running job's rendezvous (read-only); --record to audit",
                       description=__doc__ + "\nexamples:\n"
                       "  elastic-chaos watch --etcd 127.0.0.1:2379 --run-id my-job --duration 600\n"
                       "  elastic-chaos watch --etcd etcd:2379 --run-id my-job --logs /shared/logs "
                       "--record reports/prod-incident\n",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--etcd", metavar="HOST:PORT", help="the job's rendezvous etcd (torchrun --rdzv-endpoint)")
    p.add_argument("--run-id", metavar="ID", help="the job's rendezvous id (torchrun --rdzv-id)")
    p.add_argument("--platform", choices=["etcd", "kubernetes"], default="etcd",
                   help="etcd (default): watch --etcd directly; kubernetes: find the job by --job NAME")
    p.add_argument("--job", metavar="NAME", help="with --platform kubernetes: the job to watch")
    p.add_argument("--logs", type=Path, metavar="DIR", help="folder of the job's node logs (<node>.log) "
                   "to follow for training progress")
    p.add_argument("--record", type=Path, metavar="DIR", help="write timeline.jsonl, report.json and "
                   "report.html into DIR")
    p.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this long (default: Ctrl-C)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from chaos.live import WatchOptions, watch
    from chaos.reporting.load import analyze_faults
    from chaos.reporting.record import watch_verdict
    if args.platform == "kubernetes":
        raise SpecError("--platform kubernetes is not available yet: chaos.platforms.kubernetes is not part "
                        "of this build. Watch the job's rendezvous etcd directly with --etcd HOST:PORT "
                        "--run-id ID (e.g. after `kubectl port-forward svc/etcd 2379`)")
    if not args.etcd or not args.run_id:
        raise SpecError("watch needs --etcd HOST:PORT and --run-id ID (torchrun's --rdzv-endpoint and "
                        "--rdzv-id of the job)")
    opts = WatchOptions(etcd=args.etcd, run_id=args.run_id, record=args.record, duration_s=args.duration,
                        logs=args.logs)
    result = watch(opts)
    if result.record is not None:
        print(f"\nrecorded: {result.record / 'timeline.jsonl'}")
        if result.report_html is not None:
            print(f"report: {result.report_html.resolve()}")
    saw_progress = any(e.source == "progress" and e.kind == "step" for e in result.events)
    verdict = watch_verdict(analyze_faults(result.events), saw_progress, [])
    for reason in verdict["reasons"]:
        print(f"  {reason}")
    return 0 if verdict["passed"] else 1
