"""``elastic-chaos report DIR``: (re-)render a run's report.html, summary.md and timeline.png.

Reads only the folder (report.json, timeline.jsonl, nodes/*.log), so it works
for a run that crashed: without report.json the metrics are recomputed from
the timeline and the report says what is missing. Writes metrics.prom too (and
pushes it with --pushgateway). Exit 0 when the run passed,
1 when it failed or never reached a verdict, 2 when DIR is not a report folder
(or the push failed).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("report", help="render report.html / summary.md / timeline.png of a run folder",
                       description=__doc__ + "\nexamples:\n  elastic-chaos report reports/demo-20250101-120000\n"
                       "  elastic-chaos report reports/*/ --no-png\n"
                       "  elastic-chaos report reports/nightly --pushgateway http://pushgateway:9091\n",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="report folder(s) of a run")
    p.add_argument("--no-png", dest="png", action="store_false", default=True,
                   help="skip timeline.png (matplotlib)")
    from elastic_chaos.cli import pushgateway
    pushgateway.add_flag(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from elastic_chaos.analysis.verdict import verdict_word
    from elastic_chaos.cli.pushgateway import preflight, push_report
    from elastic_chaos.reporting import render_folder
    preflight(args.pushgateway)
    code = 0
    for folder in args.dirs:
        result = render_folder(folder, png=args.png)
        run = result.run
        word = verdict_word(run.result.verdict)
        print(f"{folder}: {word}, {len(run.faults)} fault(s), {len(result.findings)} tuning finding(s)")
        for note in [*run.missing, *result.notes]:
            print(f"  note: {note}")
        for path in (result.markdown, result.png, result.html):
            if path is not None:
                print(f"  wrote {path}")
        if run.passed is not True:
            code = 1
        if not push_report(run, args.pushgateway):
            return 2
    return code
