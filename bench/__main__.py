"""`python -m bench [--quick]`: run the benchmarks, write bench/results.json and bench/RESULTS.md.

`--only PATTERN --merge` re-measures matching recovery cases (with a floor
measured in the same run, so their ratios stay same-run ratios) and updates
them in an existing results.json, keeping every other figure.
"""
from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import fidelity, floor, gpu, integrity, overhead, rdzv_scale, recovery, replay, report, scale, storage
from bench.findings import recovery_findings, scale_findings, spot_summary
from chaos.signals import terminate_cleanly

HERE = Path(__file__).parent

FIDELITY_NOTE = ("recovery_s, regain_s, lost_steps and resumed_from_step come from the trainer's own stamps "
                 "live as well, so they agree exactly; rendezvous_s differs by how much earlier or later the "
                 "etcd watch saw the round complete than the agents logged it.")


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a subset that runs in about 5 minutes")
    p.add_argument("--reps", type=int, help="repetitions per recovery case (default 5; quick 2)")
    p.add_argument("--sizes", default=None, help="comma-separated node counts for the scale bench ('': none)")
    p.add_argument("--integrity-reps", type=int, help="kill-during-checkpoint repetitions (default 20; quick 2)")
    p.add_argument("--only", metavar="PATTERN",
                   help="only the recovery cases matching PATTERN (fnmatch, e.g. 'c10d/*/partition')")
    p.add_argument("--merge", action="store_true", help="with --only or --replay: update those figures in "
                                                        "OUT/results.json")
    p.add_argument("--replay", action="store_true", help="only the replayed-trace goodput (bench/replay.py)")
    p.add_argument("--scale-rdzv", action="store_true",
                   help="only the rendezvous at scale (bench/rdzv_scale.py): the real scale bench's jobs at --sizes "
                        "to check the harness against (kept apart: the Scale table is not replaced), then the "
                        "harness over --rdzv-sizes; merged into OUT/results.json when it exists; rewrites "
                        "chaos/scale/measured.json")
    p.add_argument("--rdzv-sizes", default=None,
                   help="comma-separated node counts for the rendezvous at scale (default "
                        f"{','.join(map(str, rdzv_scale.SIZES))}; '': only the check against real torchrun)")
    p.add_argument("--rdzv-resume", action="store_true",
                   help="with --scale-rdzv: continue the sweep in OUT/results.json; the sizes it measured are kept "
                        "(each with its date), the rest measured from the first size it did not run")
    p.add_argument("--rdzv-backends", default=",".join(rdzv_scale.BACKENDS),
                   help="with --scale-rdzv: the backends to sweep, in order (default "
                        f"{','.join(rdzv_scale.BACKENDS)}); the others' sizes in OUT/results.json are kept as they are")
    p.add_argument("--storage", action="store_true", help="only the checkpoint storage section (bench/storage.py; "
                                                          "root and /dev/fuse), merged into OUT/results.json")
    p.add_argument("--render", action="store_true",
                   help="measure nothing: re-render OUT/RESULTS.md and the plot from OUT/results.json")
    p.add_argument("--out", type=Path, default=HERE, help="where results.json and RESULTS.md go")
    p.add_argument("--runs", type=Path, help="where the runs' report folders go (default: a temp dir)")
    args = p.parse_args(argv)
    if args.scale_rdzv and (args.quick or args.only or args.replay or args.storage):
        p.error("--scale-rdzv runs alone: without --quick, --only, --replay or --storage")
    if args.rdzv_resume and not args.scale_rdzv:
        p.error("--rdzv-resume continues the rendezvous-at-scale sweep: give it with --scale-rdzv")
    if args.rdzv_resume and not ((args.out / "results.json").exists() and _swept(args.out / "results.json")):
        p.error(f"--rdzv-resume: {args.out / 'results.json'} holds no rendezvous-at-scale sweep to continue; "
                "run `python -m bench --scale-rdzv` without it")
    backends = tuple(b.strip() for b in args.rdzv_backends.split(",") if b.strip())
    if not backends or any(b not in rdzv_scale.BACKENDS for b in backends):
        p.error(f"--rdzv-backends {args.rdzv_backends!r}: one or more of {', '.join(rdzv_scale.BACKENDS)}, by commas")
    if backends != rdzv_scale.BACKENDS and not args.scale_rdzv:
        p.error("--rdzv-backends chooses what --scale-rdzv sweeps: give it with --scale-rdzv")
    args.rdzv_backends = backends
    if args.merge and not (args.only or args.replay):
        p.error("--merge needs --only or --replay")
    if args.storage and not (args.out / "results.json").exists():
        p.error(f"--storage merges into {args.out / 'results.json'}, which does not exist; run the full bench first")
    if args.merge and not (args.out / "results.json").exists():
        p.error(f"--merge: {args.out / 'results.json'} does not exist; run the full bench first")
    return args


def measure_recovery(args: argparse.Namespace, reps: int, runs: Path, floor_s: float | None,
                     results: dict[str, Any]) -> list[Path]:
    run_dirs = []
    for case in recovery.cases(args.quick):
        if args.only and not fnmatch.fnmatch(case.key, args.only):
            continue
        why = recovery.unavailable(case)
        if why:
            results["skipped"][case.key] = why
            say(f"skip {case.key}: {why}")
            continue
        results["skipped"].pop(case.key, None)
        say(f"recovery {case.key} x{reps}")
        case_result = recovery.case_result(recovery.run_case(case, reps, runs, say), floor_s)
        case_result["floor_s"] = floor_s  # the floor this case's ratio was taken against
        results["recovery"][case.key] = case_result
        run_dirs.append(runs / recovery.run_folder(case))
    return run_dirs


def measure_scale(args: argparse.Namespace, runs: Path, results: dict[str, Any]) -> None:
    sizes = _sizes(args.sizes, "2" if args.quick else "2,4,8,16")
    if not sizes:
        say("scale: no sizes (--sizes ''): the real jobs are not run, the last ones are kept")
        return
    say(f"scale: {sizes}")
    results["scale"] = [scale.run_size(n, runs, say) for n in sizes]


def _sizes(given: str | None, default: str) -> list[int]:
    """``--sizes``-style node counts; '' means none."""
    return [int(s) for s in (default if given is None else given).split(",") if s.strip()]


def measure_rdzv_scale(args: argparse.Namespace, runs: Path, results: dict[str, Any]) -> None:
    """The harness over --rdzv-sizes, checked against the scale bench's real jobs; the shipped figures."""
    began = time.monotonic()
    sizes = _sizes(args.rdzv_sizes, ",".join(map(str, rdzv_scale.SIZES)))
    section = results.setdefault("rdzv_scale", {})
    real = section.get("real") if args.scale_rdzv else results.get("scale")
    section["validation"] = rdzv_scale.validate(real or [], runs, say)
    section["validated"] = datetime.date.today().isoformat()
    if not sizes:
        say("rendezvous at scale: no sizes (--rdzv-sizes ''): only the check against real torchrun, the sweep kept")
        return
    say(f"rendezvous at scale: {sizes} on {', '.join(args.rdzv_backends)}")
    command = "python -m bench --scale-rdzv" if args.scale_rdzv else "make bench"
    section.pop("notes", None)  # hand-written notes on how an earlier sweep was put together: not this one's
    kept: dict[str, list[dict[str, Any]]] = {}
    if args.rdzv_resume:
        kept = rdzv_scale.resumable({b: v for b, v in (section.get("sizes") or {}).items()
                                     if b in args.rdzv_backends}, sizes)
        for size in (s for done in kept.values() for s in done):
            size.setdefault("date", section.get("date"))  # measured before sizes carried their own date
        which = "; ".join(f"{b} {', '.join(str(s['nodes']) for s in done)}" for b, done in kept.items() if done)
        section["resumed"] = (f"this sweep continued the one of {section.get('date')} (`{section.get('command')}`), "
                              f"whose sizes it kept: {which or 'none'} nodes")
        command += " --rdzv-resume"
    else:
        section.pop("resumed", None)
    others = {b: list(s) for b, s in (section.get("sizes") or {}).items() if b not in args.rdzv_backends}
    section.pop("not_swept", None)
    if others:  # not swept this time: kept as they were
        for size in (s for v in others.values() for s in v):
            size.setdefault("date", section.get("date"))
        section["not_swept"] = "; ".join(
            f"{b}, whose sizes were kept as measured ({', '.join(sorted({str(s['date']) for s in v}))})"
            for b, v in others.items())
        command += f" --rdzv-backends {','.join(args.rdzv_backends)}"
    done: dict[str, list[dict[str, Any]]] = {b: list(s) for b, s in {**kept, **others}.items()}

    def keep(size: dict[str, Any]) -> None:
        """Each size into OUT/results.json as it ends: a sweep stopped midway (hours at 1,024 nodes) keeps what it
        measured, said so in the section, and `python -m bench --render` writes it up."""
        done.setdefault(size["backend"], []).append(size)
        section.update({**rdzv_scale.where(), "command": command, "sizes": done,
                        "wall_s": round(time.monotonic() - began),
                        "interrupted": f"the sweep did not finish: it had measured up to {size['backend']} "
                                       f"{size['nodes']} nodes when it stopped; the sizes after it have no figures"})
        if args.scale_rdzv:  # every other figure was read from OUT/results.json: nothing of it is lost
            report.write_json(results, args.out / "results.json")

    swept = rdzv_scale.sweep(sizes, args.rdzv_backends, runs, say, on_size=keep, kept=kept)
    section.pop("interrupted", None)
    section.update({**rdzv_scale.where(), "command": command,
                    "sizes": {b: swept.get(b) or others[b] for b in rdzv_scale.BACKENDS if b in swept or b in others},
                    "wall_s": round(time.monotonic() - began)})


def _swept(path: Path) -> bool:
    """Whether results.json at ``path`` holds a rendezvous-at-scale sweep (what --rdzv-resume continues)."""
    try:
        return bool((json.loads(path.read_text()).get("rdzv_scale") or {}).get("sizes"))
    except (OSError, ValueError, AttributeError):
        return False


def measure_rest(args: argparse.Namespace, runs: Path, run_dirs: list[Path], results: dict[str, Any]) -> None:
    measure_scale(args, runs, results)
    if not args.quick:
        measure_rdzv_scale(args, runs, results)
    integrity_reps = args.integrity_reps or (2 if args.quick else 20)
    say(f"checkpoint integrity: {integrity_reps} kills during checkpoint writes")
    results["integrity"] = integrity.kill_during_checkpoint(integrity_reps, runs, say)
    say("overhead")
    results["overhead"] = {"watchers": overhead.watcher_overhead(runs, window_s=15.0 if args.quick else 30.0),
                           "timeline": overhead.timeline_throughput()}
    say("fidelity")
    results["fidelity"] = {**fidelity.fidelity(run_dirs), "note": FIDELITY_NOTE}


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.render:
        return render(args.out)
    terminate_cleanly()  # `kill PID` stops the case at hand and everything it started
    reps = args.reps or (2 if args.quick else 5)
    began = time.monotonic()
    runs = args.runs or Path(tempfile.mkdtemp(prefix="elastic-chaos-bench-"))
    say(f"runs go to {runs}")
    if args.scale_rdzv:
        return scale_rdzv_only(args, runs)
    results: dict[str, Any] = (json.loads((args.out / "results.json").read_text()) if args.merge or args.storage
                               else {"recovery": {}, "skipped": {}})
    stamp = {"command": "make bench-quick" if args.quick else "make bench",
             "date": datetime.date.today().isoformat()}
    if args.storage:   # its own date and command; every other figure kept
        results["storage"] = measure_storage(args, runs, stamp)
        write(args.out, results, say)
        return 0
    results.update({"machine": f"{platform.node()} ({platform.machine()}, {os.cpu_count()} cores)", "reps": reps})
    if args.merge:
        results.setdefault("remeasured", []).append({**stamp, "only": args.only})
    else:
        results.update(stamp)

    if args.replay:
        if args.merge:
            results["remeasured"].pop()   # the replay block carries its own date
        results["replay"] = replay.measure(args.quick, runs, say, date=stamp["date"])
        write(args.out, results, say)
        return 0
    say("floor: a worker's cold start")
    fl = floor.measure_floor(3 if args.quick else 5)
    if not args.merge:
        results["floor_s"], results["floor_parts"] = fl["floor_s"], fl["parts"]
    say(f"floor {fl['floor_s']['median']} s")
    run_dirs = measure_recovery(args, reps, runs, fl["floor_s"]["median"], results)
    if not args.only:
        say("gpu: the floor and the presets on NCCL, when this machine has GPUs")
        results["gpu"] = gpu.measure(args.quick, reps, runs, say)
        say(f"gpu: {results['gpu'].get('skipped') or 'measured'}")
        measure_rest(args, runs, run_dirs, results)
        results["replay"] = replay.measure(args.quick, runs, say, date=stamp["date"])
        results["storage"] = measure_storage(args, runs, stamp)
    wall = round(time.monotonic() - began)
    if args.merge:
        results["remeasured"][-1]["wall_s"] = wall
    else:
        results["wall_s"] = wall
    write(args.out, results, say)
    for line in spot_summary(results):
        say(line)
    return 0


def scale_rdzv_only(args: argparse.Namespace, runs: Path) -> int:
    """``--scale-rdzv``: the rendezvous-at-scale section only, every other figure of OUT/results.json kept
    as it is (the section carries its own date and command)."""
    path = args.out / "results.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    real: dict[str, Any] = {}  # the scale bench's real jobs, for the check only: its own table is kept
    measure_scale(args, runs, real)
    if "scale" in real:
        results.setdefault("rdzv_scale", {})["real"] = real["scale"]
    measure_rdzv_scale(args, runs, results)
    write(args.out, results, say)
    return 0


def measure_storage(args: argparse.Namespace, runs: Path, stamp: dict[str, str]) -> dict[str, Any]:
    began = time.monotonic()
    command = "python -m bench --storage" + (" --quick" if args.quick else "") if args.storage else stamp["command"]
    return {**storage.measure(args.quick, runs, say), "date": stamp["date"], "command": command,
            "wall_s": round(time.monotonic() - began)}


def read_results(out: Path, who: str, advice: str) -> dict[str, Any] | None:
    """OUT/results.json, or None after saying on stderr why it cannot be read and what to do."""
    path = out / "results.json"
    try:
        results: dict[str, Any] = json.loads(path.read_text())
        return results
    except (OSError, ValueError) as e:
        print(f"{who}: cannot read {path}: {e}; {advice}", file=sys.stderr)
        return None


def render(out: Path) -> int:
    results = read_results(out, "bench", "run `make bench` to measure")
    if results is None:
        return 2
    write(out, results, say)
    return 0


def record(out: Path, key: str, section: dict[str, Any], who: str) -> int:
    """Put ``section`` under ``key`` of OUT/results.json (every other figure kept) and re-render RESULTS.md:
    for figures measured elsewhere (bench/gpu_runs.py, bench/device_runs.py). 2 when there is none yet."""
    results = read_results(out, who, "run `make bench` first")
    if results is None:
        return 2
    results[key] = section
    write(out, results, say)
    return 0


def write(out: Path, results: dict[str, Any], say: Callable[[str], None]) -> None:
    # findings are derived from the figures here, for every path (a measurement, a
    # merge, --render), so a newer bench explains older figures too
    results["findings"] = recovery_findings(results)
    if "scale" in results:
        results["scale_findings"] = scale_findings(results["scale"])
    has_rdzv = bool((results.get("rdzv_scale") or {}).get("sizes"))
    if has_rdzv:  # the shipped figures, derived here from the sizes for every path (a sweep, --render)
        section = results["rdzv_scale"]
        figs = rdzv_scale.figures(section["sizes"], section)
        section["figures"] = figs.to_json()
        section["findings"] = rdzv_scale.findings(section) + rdzv_scale.recorded_finding(results)
        from chaos.scale.figures import save
        say(f"wrote {save(figs)}")
    out.mkdir(parents=True, exist_ok=True)
    plot_name = "recovery.png" if report.plot(results, out / "recovery.png") else None
    rdzv_plot = None
    if has_rdzv:
        from chaos.scale.figures import Figures
        figs = Figures.from_json(results["rdzv_scale"]["figures"])
        rdzv_plot = "rdzv_scale.png" if rdzv_scale.plot(figs, out / "rdzv_scale.png") else None
    report.write_json(results, out / "results.json")
    report.write_markdown(results, out / "RESULTS.md", plot_name, rdzv_plot)
    say(f"wrote {out / 'results.json'} and {out / 'RESULTS.md'}")


if __name__ == "__main__":
    sys.exit(main())
