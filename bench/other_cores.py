"""`python -m bench.other_cores`: figures measured on another machine's cores, kept apart from this VM's.

A lent device machine (16 cores, a CUDA build of torch) answers two of issue 27's questions that this
repository's 2-core VM cannot: the rendezvous harness at N >= 256 (bench/rdzv/large_sizes.sh: one JSON per
size) and the spot-interruption ratio to the floor with and without leaving the rendezvous
(`python -m bench --only '*/fast/spot-interruption*' --reps 1`: that run's results.json). Those are
other cores and another torch build, so they never enter this machine's tables or fitted models: they go
to results.json's ``device_runs`` and a section of their own in RESULTS.md (bench/render/other_cores.py), one
entry per run.

    python -m bench.other_cores --device "1 x H200 machine, 16 cores, torch 2.11.0+cu130" \\
        --scale OUT1/rdzv-c10d-256.json OUT1/rdzv-c10d-512.json --spot OUT2/results.json OUT3/results.json
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

from bench.findings import spot_pairs
from bench.rdzv.records import SizeResult

HERE = Path(__file__).resolve().parent


def spot_run(results: dict[str, Any]) -> dict[str, Any]:
    """One spot-ratio run (a `python -m bench --only` results.json): its floor, and per case the recovery,
    its ratio to that floor and the phases, as that run computed them (nothing recomputed)."""
    cases = {}
    for key, without, with_ in spot_pairs(results):
        for name, case in (("without", without), ("with", with_)):
            cases[f"{key}/{name}"] = {"ratio": case.get("ratio_to_floor"),
                                      **{k: (case.get(k) or {}).get("median") if isinstance(case.get(k), dict)
                                         else case.get(k) for k in ("recovery_s", "detect", "rendezvous", "restart")}}
    return {"floor_s": (results.get("floor_s") or {}).get("median"), "reps": results.get("reps"),
            "machine": results.get("machine"), "date": results.get("date"), "cases": cases}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.other_cores", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", required=True, help="the machine, in words (cores, torch build)")
    p.add_argument("--scale", nargs="*", type=Path, default=[], metavar="RDZV_JSON",
                   help="bench/rdzv/large_sizes.sh's rdzv-BACKEND-N.json files, smallest size first")
    p.add_argument("--scale-command", default="SIZES=256,512,1024 bash bench/rdzv/large_sizes.sh")
    p.add_argument("--spot", nargs="*", type=Path, default=[], metavar="RESULTS_JSON",
                   help="results.json of `python -m bench --only '*/fast/spot-interruption*'` runs")
    p.add_argument("--spot-command", default="python -m bench --only '*/fast/spot-interruption*' --reps 1")
    p.add_argument("--note", action="append", default=[], help="a line said under the tables (repeatable)")
    p.add_argument("--out", type=Path, default=HERE)
    args = p.parse_args(argv)
    if not args.scale and not args.spot:
        p.error("nothing to record: give --scale and/or --spot files")
    try:
        scale = [SizeResult.from_json(json.loads(f.read_text())["size"]).to_json() for f in args.scale]
        spot = [spot_run(json.loads(f.read_text())) for f in args.spot]
    except (OSError, ValueError, KeyError, TypeError) as e:
        p.error(f"cannot read a device result: {e}")
    from bench.__main__ import say
    from bench.results_file import record
    return record(args.out, "device_runs", {"device": args.device, "date": datetime.date.today().isoformat(),
                                            "scale": scale, "scale_command": args.scale_command, "spot": spot,
                                            "spot_command": args.spot_command, "notes": args.note},
                  "bench.other_cores", say)


if __name__ == "__main__":
    sys.exit(main())
