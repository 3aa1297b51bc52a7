"""`python -m bench [--quick]`: run the benchmarks, write bench/results.json and bench/RESULTS.md."""
from __future__ import annotations

import argparse
import datetime
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import fidelity, floor, integrity, overhead, recovery, report, scale
from bench.findings import recovery_findings, scale_findings
from chaos.signals import terminate_cleanly

HERE = Path(__file__).parent


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="a subset that runs in under 5 minutes")
    p.add_argument("--reps", type=int, help="repetitions per recovery case (default 5; quick 2)")
    p.add_argument("--sizes", default=None, help="comma-separated node counts for the scale bench")
    p.add_argument("--integrity-reps", type=int, help="kill-during-checkpoint repetitions (default 20; quick 2)")
    p.add_argument("--out", type=Path, default=HERE, help="where results.json and RESULTS.md go")
    p.add_argument("--runs", type=Path, help="where the runs' report folders go (default: a temp dir)")
    args = p.parse_args(argv)
    terminate_cleanly()  # `kill PID` stops the case at hand and everything it started
    reps = args.reps or (2 if args.quick else 5)
    sizes = [int(s) for s in (args.sizes or ("2" if args.quick else "2,4,8,16")).split(",")]
    began = time.monotonic()
    runs = args.runs or Path(tempfile.mkdtemp(prefix="elastic-chaos-bench-"))
    say(f"runs go to {runs}")
    results: dict[str, Any] = {"command": "make bench-quick" if args.quick else "make bench",
                               "machine": f"{platform.node()} ({platform.machine()}, "
                                          f"{__import__('os').cpu_count()} cores)",
                               "date": datetime.date.today().isoformat(), "reps": reps}

    say("floor: a worker's cold start")
    fl = floor.measure_floor(3 if args.quick else 5)
    results["floor_s"], results["floor_parts"] = fl["floor_s"], fl["parts"]
    floor_s = results["floor_s"]["median"]
    say(f"floor {floor_s} s")

    results["recovery"], results["skipped"] = {}, {}
    run_dirs = []
    for case in recovery.cases(args.quick):
        why = recovery.unavailable(case)
        if why:
            results["skipped"][case.key] = why
            say(f"skip {case.key}: {why}")
            continue
        say(f"recovery {case.key} x{reps}")
        recs = recovery.run_case(case, reps, runs, say)
        results["recovery"][case.key] = recovery.case_result(recs, floor_s)
        run_dirs.append(runs / case.key.replace("/", "_"))
    results["findings"] = recovery_findings(results)

    say(f"scale: {sizes}")
    results["scale"] = [scale.run_size(n, runs, say) for n in sizes]
    results["scale_findings"] = scale_findings(results["scale"])

    integrity_reps = args.integrity_reps or (2 if args.quick else 20)
    say(f"checkpoint integrity: {integrity_reps} kills during checkpoint writes")
    results["integrity"] = integrity.kill_during_checkpoint(integrity_reps, runs, say)

    say("overhead")
    results["overhead"] = {"watchers": overhead.watcher_overhead(runs, window_s=15.0 if args.quick else 30.0),
                           "timeline": overhead.timeline_throughput()}
    say("fidelity")
    results["fidelity"] = fidelity.fidelity(run_dirs)
    results["fidelity"]["note"] = ("recovery_s, regain_s, lost_steps and resumed_from_step come from the "
                                   "trainer's own stamps live as well, so they agree exactly; the rendezvous "
                                   "and detect figures differ by how much earlier or later the etcd watch "
                                   "saw the event than the agents logged it.")
    results["wall_s"] = round(time.monotonic() - began)
    args.out.mkdir(parents=True, exist_ok=True)
    plot_name = "recovery.png" if report.plot(results, args.out / "recovery.png") else None
    report.write_json(results, args.out / "results.json")
    report.write_markdown(results, args.out / "RESULTS.md", plot_name)
    say(f"wrote {args.out / 'results.json'} and {args.out / 'RESULTS.md'} in {results['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
