"""``elastic-chaos run HYPOTHESIS``: one hypothesis about a fault, on any platform, a recovery table, an exit code.

The flags are not written here: they come from the declarations of what the
run is made of (elastic_chaos.options) — the job (JobSpec, its rendezvous and script
observation), the trial (steady state, target, timeout), the hypothesis' fault
and its own parameters, and the chosen platform's options — so the command
line, the pytest fixture and the code accept the same names, defaults and
bounds. ``elastic-chaos run HYPOTHESIS --help`` shows its fault's and its own options;
``--platform kubernetes --help`` adds the platform's.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from elastic_chaos.options import add_arguments, given

DESCRIPTION = """Start an elastic job on a platform (default: local), wait for steady training,
inject the fault HYPOTHESIS is about, watch the job heal, check the hypothesis, print
the recovery table and the report folder. `elastic-chaos faults` lists the hypotheses
(most are named after their fault; some test one fault several ways); `run HYPOTHESIS
--help` shows its options.

exit codes:
  0  the hypothesis held
  1  the hypothesis did not hold
  2  a usage or setup error (bad input: nothing was run)
  3  no experiment: the job was not steady before the fault (it crashed, restarted or did not
     train at its size), or it finished its training on its own before its fault could be
     judged; report.json's outcome says which (not_steady, job_finished)
  4  the toolkit failed (a watcher died, cleanup or the metrics push failed): the run says
     nothing about the job
  130 interrupted (Ctrl-C, SIGTERM)

examples:
  elastic-chaos run kill-node --nodes 1:2 --checkpoint-every 20 --no-replace
  elastic-chaos run kill-node --platform kubernetes --kubeconfig .cluster/kubeconfig
  elastic-chaos run spot-interruption --notice 8 --grace 20 --report-dir reports/spot
  elastic-chaos run spot-interruption --aws-timing           # AWS's real 2-minute notice
  sudo elastic-chaos run partition --pg-timeout 15 --duration 60
  elastic-chaos run etcd-outage --duration 10 --store-outage hang --during-rendezvous
  elastic-chaos run repeated --mtbf 45 --run-for 300 --seed 7
  elastic-chaos run kill-during-checkpoint --repetitions 20
  elastic-chaos run kill-node --compare-final        # ends bitwise where a clean run at full size does
  elastic-chaos run kill-node --no-replace --compare-final   # ... where a clean replay of its world sizes does
  elastic-chaos run kill-node --report-dir reports/nightly --overwrite   # replaces the last nightly run
  elastic-chaos run spot-interruption --instance-type p4d.24xlarge --mtbf-hours 24   # what each one costs
  elastic-chaos run straggler --factor 2 --duration 20        # one node at half speed for 20 s
  elastic-chaos run hung-rank --pg-timeout 20                 # one worker stops; peers time out at 20 s
  elastic-chaos run replay --trace spot-3 --compress 30         # a bundled trace (or --trace FILE.csv)
  elastic-chaos run replay --bursts 3 --burst-size 2 --seed 7 --compress 60 --pushgateway localhost:9091
  elastic-chaos run replay --trace my-fleet.csv --compress 20 --dry-run   # every check a run makes; starts nothing

your own training script (everything after -- runs on every node, unchanged):
  elastic-chaos run kill-node --progress-regex 'epoch (?P<step>\\d+)' --checkpoint snapshot.pt \\
      --unit epoch --steady-steps 5 --checkpoint-every 2 -- train.py --epochs 100
  elastic-chaos run kill-node --backend gloo --env DEVICE=cpu -- train_nccl.py   # GPU script in CPU CI
"""

SCRIPT_HELP = """Your own training script: put it and its arguments after `--`; torchrun runs it
on every node exactly as you would. Without `--` the reference trainer runs.
See README "Test your own training script" and docs/INTEGRATE.md."""

_SCRIPT_FIELDS = ("workdir", "backend")


def peek(words: list[str]) -> tuple[str | None, str]:
    """(HYPOTHESIS, --platform) from the words after ``run``, before the parser is built:
    which fault and platform declare the options to offer."""
    platform = "local"
    fault = None
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--platform" and i + 1 < len(words):
            platform = words[i + 1]
            i += 2
            continue
        if w.startswith("--platform="):
            platform = w.partition("=")[2]
        elif not w.startswith("-") and fault is None:
            fault = w
        i += 1
    return fault, platform


def register(sub: Any, words: list[str] | None = None) -> None:
    from elastic_chaos.analysis.cost import CostBasis
    from elastic_chaos.cli import pushgateway
    from elastic_chaos.errors import SpecError
    from elastic_chaos.hypotheses.api import TrialOptions
    from elastic_chaos.hypotheses.catalog import get
    from elastic_chaos.platforms import PLATFORMS, platform_option_classes
    from elastic_chaos.spec import PRESETS, JobSpec, Observation, RendezvousSpec

    fault, platform = peek(words or [])
    p = sub.add_parser("run", help="run one hypothesis about a fault (any platform)", description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("fault", metavar="HYPOTHESIS", help="a hypothesis about a fault (see `elastic-chaos faults`)")
    p.add_argument("--platform", choices=sorted(PLATFORMS), default="local",
                   help="where the job runs (default local); each adds its own options")
    p.add_argument("--report-dir", type=Path, help="report folder (default reports/<fault>-<time>); one that "
                   "already holds a run is refused")
    p.add_argument("--overwrite", action="store_true", help="delete the run a used --report-dir holds first")
    p.add_argument("--quiet", action="store_true", help="no live progress lines")
    p.add_argument("--dry-run", action="store_true",
                   help="check every option, the trace, the kubeconfig, the Pushgateway and the report folder as "
                        "a run would, print what would run, and start nothing (exit 0, or 2 naming what is wrong)")
    pushgateway.add_flag(p)
    try:
        h = get(fault) if fault else None
    except SpecError:
        h = None  # main() says the fault is unknown, with the catalog
    defaults = dict(h.defaults) if h else {}
    job = p.add_argument_group("job")
    add_arguments(job, JobSpec, skip=_SCRIPT_FIELDS, defaults=defaults)
    add_arguments(job, RendezvousSpec, defaults=defaults)
    job.add_argument("--rdzv-preset", choices=sorted(PRESETS), default=argparse.SUPPRESS,
                     help="recovery timing preset (docs/PRESETS.md); explicit knobs override it")
    add_arguments(p.add_argument_group("trial"), TrialOptions)
    if h is not None:
        group = p.add_argument_group(f"{h.name}")
        for cls in h.option_classes(platform)[1:]:
            add_arguments(group, cls, skip=("node",))
    platform_names: set[str] = set()
    if platform in PLATFORMS:
        group = p.add_argument_group(f"platform {platform}")
        for cls in platform_option_classes(platform):
            add_arguments(group, cls, defaults=defaults)
            platform_names |= set(_job_fields(cls))
    # what an interruption costs; a platform's own --gpus-per-node (kubernetes) is the same fact
    add_arguments(p.add_argument_group("cost of an interruption (docs/REPORTS.md)"), CostBasis,
                  skip=platform_names)
    script = p.add_argument_group("your own training script (after --)", SCRIPT_HELP)
    add_arguments(script, Observation)
    add_arguments(script, JobSpec, skip={f for f in _job_fields(JobSpec)} - set(_SCRIPT_FIELDS))
    script.add_argument("--env", action="append", type=_env_pair, metavar="KEY=VALUE", default=argparse.SUPPRESS,
                        help="set an environment variable on every node (repeatable)")
    p.set_defaults(func=main, script_argv=None)


def _job_fields(cls: type) -> list[str]:
    import dataclasses
    return [f.name for f in dataclasses.fields(cls)]


def _env_pair(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE (e.g. --env NCCL_DEBUG=INFO)")
    return key, val


def option_values(args: argparse.Namespace) -> dict[str, Any]:
    """The options given on the command line, by name (what the pytest fixture takes)."""
    from elastic_chaos.analysis.cost import CostBasis
    from elastic_chaos.hypotheses.catalog import get
    from elastic_chaos.platforms import platform_option_classes
    from elastic_chaos.spec import JOB_OPTION_CLASSES, Observation, locate_script
    h = get(args.fault)
    classes = [*JOB_OPTION_CLASSES, *h.option_classes(args.platform), *platform_option_classes(args.platform),
               CostBasis]
    values: dict[str, Any] = {}
    for cls in classes:
        values.update(given(args, cls))
    for key in ("rdzv_preset", "env"):
        if hasattr(args, key):
            values[key] = getattr(args, key)
    if args.script_argv is not None:
        Observation(**given(args, Observation))  # a bad pattern is reported before a missing script
        values["script"] = locate_script(args.script_argv)
    elif any(values.get(k) for k in ("progress_regex", "resume_regex", "checkpoint")):
        from elastic_chaos.errors import SpecError
        raise SpecError("--progress-regex, --resume-regex and --checkpoint observe your own script: give it "
                        "after `--` (e.g. `-- train.py --epochs 10`); the reference trainer reports through "
                        "elastic_chaos.trainer.progress")
    return values


def main(args: argparse.Namespace) -> int:
    from elastic_chaos.analysis.verdict import Outcome
    from elastic_chaos.cli.pushgateway import preflight, push_report
    from elastic_chaos.hypotheses.execute import execute
    values = option_values(args)
    preflight(args.pushgateway)
    report_dir = args.report_dir or default_report_dir(args.fault)
    if args.dry_run:
        return dry_run(args, values, report_dir)
    run = execute(args.fault, values, report_dir=report_dir, platform=args.platform,
                  on_start=None if args.quiet else console, overwrite=args.overwrite)
    code = summarize(run)
    if run.report is not None and not push_report(run.report, args.pushgateway):
        return Outcome.TOOLKIT_ERROR.exit_code   # the run's verdict stands; its metrics did not reach the gateway
    return code


def dry_run(args: argparse.Namespace, values: dict[str, Any], report_dir: Path) -> int:
    """``--dry-run``: what ``execute`` checks before it starts a job, and the report folder's
    refusals, with nothing started, created or written (elastic_chaos.hypotheses.dryrun)."""
    from elastic_chaos.hypotheses.dryrun import plan
    from elastic_chaos.runner.folder import check
    made = plan(args.fault, values, args.platform)
    folder = check(report_dir, overwrite=args.overwrite)
    for line in made.describe():
        print(line)
    print(f"platform: {args.platform}; report folder: {folder}"
          + (f"; metrics pushed to {args.pushgateway}" if args.pushgateway else ""))
    print("dry run: every check passed; nothing was started")
    return 0


def console(run: Any) -> None:
    from elastic_chaos.cli.live_console import ConsoleProgress
    ConsoleProgress(run.timeline)


def default_report_dir(name: str) -> Path:
    import datetime
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("reports") / f"{name}-{stamp}"


def summarize(run: Any) -> int:
    """Print the tables of a closed run's report (from memory: report.json is not read back);
    the exit code of its outcome (elastic_chaos.analysis.verdict.Outcome)."""
    from elastic_chaos.analysis.verdict import Outcome
    from elastic_chaos.reporting.report import render_table
    report = run.report
    if report is None:
        print(f"\nthe run in {run.report_dir} made no report; `elastic-chaos report {run.report_dir}` shows what "
              "the folder holds")
        return 1
    print()
    print(render_table(report.result))
    outcome = report.result.verdict.outcome if report.result.verdict else Outcome.FAILED
    print(f"\nreport folder: {report.folder}  (report.json, timeline.jsonl, nodes/*.log, summary.md)")
    if run.rendered is not None:
        print(f"report: {run.rendered.html.resolve()}")
    else:
        print(f"report.html was not written; render it with `elastic-chaos report {report.folder}`")
    sys.stdout.flush()
    return outcome.exit_code
