"""`python -m bench.nccl_runs`: the faults on NCCL, one run each (bench/nccl_runs.sh on a GPU), into results.json.

A lent GPU machine gives a session minutes, not the hour `make bench`'s GPU section needs, so
bench/nccl_runs.sh runs each GPU path once (the demo, kill-node and spot-interruption on NCCL
with the fast preset, a 30 s freeze). This reads the report.json files it brought back and keeps,
per run, what the report measured: verdict, run length, goodput and the recovery's phases. They go
to results.json's ``gpu_runs`` (every other figure kept) and RESULTS.md's GPU section, marked as
one run each: figures to compare with the CPU medians, not medians themselves (bench/render/gpu.py).

    python -m bench.nccl_runs --device "1 x NVIDIA H200, torch 2.11.0+cu130, NCCL 2.28.9" \\
        --command "bash bench/nccl_runs.sh" demo=OUT/demo.report.json kill-fast=OUT/kill-fast.report.json
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

from elastic_chaos.analysis.recovery import PHASES

HERE = Path(__file__).resolve().parent


def summarize(name: str, report: dict[str, Any]) -> dict[str, Any]:
    """One run's row: what its report.json measured (nothing recomputed)."""
    job, verdict = report.get("job") or {}, report.get("verdict") or {}
    started, finished = report.get("started_at"), report.get("finished_at")
    row: dict[str, Any] = {
        "name": name, "scenario": report.get("scenario"), "passed": verdict.get("passed"),
        "backend": job.get("backend"), "pg_timeout_s": job.get("pg_timeout_s"),
        "run_s": round(finished - started, 1) if isinstance(started, float) and isinstance(finished, float) else None,
        "goodput": report.get("goodput"), "faults": []}
    for f in report.get("faults") or []:
        m = f.get("metrics") or {}
        row["faults"].append({"kind": f.get("kind"), "target": f.get("target"),
                              "phases": {p: (m.get("phases") or {}).get(p) for p in PHASES},
                              **{k: m.get(k) for k in ("regain_s", "lost_steps", "world_size_before",
                                                       "world_size_final", "replacement_s")}})
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.nccl_runs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="NAME=REPORT_JSON")
    p.add_argument("--device", required=True, help="the machine, in words (GPU, torch, CUDA, NCCL)")
    p.add_argument("--command", default="bash bench/nccl_runs.sh")
    p.add_argument("--note", action="append", default=[], help="a line said under the table (repeatable)")
    p.add_argument("--out", type=Path, default=HERE)
    args = p.parse_args(argv)
    rows = []
    for item in args.runs:
        name, sep, path = item.partition("=")
        if not sep or not name:
            p.error(f"{item!r}: expected NAME=REPORT_JSON")
        try:
            rows.append(summarize(name, json.loads(Path(path).read_text())))
        except (OSError, ValueError) as e:
            p.error(f"{path}: cannot read a report.json: {e}")
    from bench.__main__ import say
    from bench.results_file import record
    return record(args.out, "gpu_runs", {"device": args.device, "command": args.command, "notes": args.note,
                                         "date": datetime.date.today().isoformat(), "runs": rows}, "bench.nccl_runs",
                  say)


if __name__ == "__main__":
    sys.exit(main())
