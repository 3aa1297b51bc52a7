"""`python -m bench [--quick]`: run the benchmarks, write bench/results.json and bench/RESULTS.md.

`--only PATTERN --merge` re-measures matching recovery cases (with a floor
measured in the same run, so their ratios stay same-run ratios) and updates
them in an existing results.json, keeping every other figure.
"""
from __future__ import annotations

import argparse
import datetime
import fnmatch
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import (
    dcp,
    fidelity,
    floor,
    gpu,
    integrity,
    local_nodes,
    network,
    overhead,
    recovery,
    replay,
    storage,
    store_model,
)
from bench.findings import spot_summary
from bench.rdzv import measure as rdzv
from bench.rdzv.section import KEY as RDZV
from bench.rdzv.section import RdzvSection
from bench.rdzv.sweep import BACKENDS as RDZV_BACKENDS
from bench.rdzv.sweep import SIZES as RDZV_SIZES
from bench.results_file import read_json, read_results, write, write_json
from elastic_chaos.signals import terminate_cleanly

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
                   help="only the rendezvous at scale (bench/rdzv): the real scale bench's jobs at --sizes "
                        "to check the harness against (kept apart: the Scale table is not replaced), then the "
                        "harness over --rdzv-sizes; merged into OUT/results.json when it exists; rewrites "
                        "elastic_chaos/scale/measured.json")
    p.add_argument("--rdzv-sizes", default=None,
                   help="comma-separated node counts for the rendezvous at scale (default "
                        f"{','.join(map(str, RDZV_SIZES))}; '': only the check against real torchrun)")
    p.add_argument("--rdzv-resume", action="store_true",
                   help="with --scale-rdzv: continue the sweep in OUT/results.json; the sizes it measured are kept "
                        "(each with its date), the rest measured from the first size it did not run")
    p.add_argument("--rdzv-backends", default=",".join(RDZV_BACKENDS),
                   help="with --scale-rdzv: the backends to sweep, in order (default "
                        f"{','.join(RDZV_BACKENDS)}); the others' sizes in OUT/results.json are kept as they are")
    p.add_argument("--storage", action="store_true", help="only the checkpoint storage section (bench/storage.py; "
                                                          "root and /dev/fuse), merged into OUT/results.json")
    p.add_argument("--network", action="store_true", help="only the network section (bench/network.py: step time "
                                                          "and recovery against a link's delay and loss; root and "
                                                          "iptables), merged into OUT/results.json")
    p.add_argument("--dcp", action="store_true", help="only the sharded-saves section (bench/dcp.py: save time and "
                                                      "stall of sync vs async DCP saves and the file format), "
                                                      "merged into OUT/results.json")
    p.add_argument("--store-model", action="store_true",
                   help="only the c10d store's costs (bench/rdzv/storebench.py: torch's state, client and "
                        "TCPStore, about a minute) and the store model against the rendezvous-at-scale rows "
                        "(bench/store_model.py), merged into OUT/results.json; rewrites "
                        "elastic_chaos/scale/store_costs.json")
    p.add_argument("--render", action="store_true",
                   help="measure nothing: re-render OUT/RESULTS.md and the plot from OUT/results.json")
    p.add_argument("--out", type=Path, default=HERE, help="where results.json and RESULTS.md go")
    p.add_argument("--runs", type=Path, help="where the runs' report folders go (default: a temp dir)")
    args = p.parse_args(argv)
    if args.scale_rdzv and (args.quick or args.only or args.replay or args.storage or args.network or args.dcp):
        p.error("--scale-rdzv runs alone: without --quick, --only, --replay, --storage, --network or --dcp")
    if args.rdzv_resume and not args.scale_rdzv:
        p.error("--rdzv-resume continues the rendezvous-at-scale sweep: give it with --scale-rdzv")
    if args.rdzv_resume and not _swept(args.out / "results.json"):
        p.error(f"--rdzv-resume: {args.out / 'results.json'} holds no rendezvous-at-scale sweep to continue; "
                "run `python -m bench --scale-rdzv` without it")
    backends = rdzv.backends_arg(args.rdzv_backends)
    if backends is None:
        p.error(f"--rdzv-backends {args.rdzv_backends!r}: one or more of {', '.join(RDZV_BACKENDS)}, by commas")
    if backends != RDZV_BACKENDS and not args.scale_rdzv:
        p.error("--rdzv-backends chooses what --scale-rdzv sweeps: give it with --scale-rdzv")
    args.rdzv_backends = backends
    if args.merge and not (args.only or args.replay):
        p.error("--merge needs --only or --replay")
    for only, flag in ((args.storage, "--storage"), (args.network, "--network"), (args.dcp, "--dcp"),
                       (args.store_model, "--store-model")):
        if only and not (args.out / "results.json").exists():
            p.error(f"{flag} merges into {args.out / 'results.json'}, which does not exist; run the full bench first")
    if sum((args.storage, args.network, args.dcp, args.store_model)) > 1:
        p.error("--storage, --network, --dcp and --store-model each measure one section: give one")
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
    sizes = rdzv.sizes_arg(args.sizes, "2" if args.quick else "2,4,8,16")
    if not sizes:
        say("scale: no sizes (--sizes ''): the real jobs are not run, the last ones are kept")
        return
    say(f"scale: {sizes}")
    results["scale"] = [local_nodes.run_size(n, runs, say).to_json() for n in sizes]


def _swept(path: Path) -> bool:
    """Whether results.json at ``path`` holds a rendezvous-at-scale sweep (what --rdzv-resume continues)."""
    try:
        return RdzvSection.of(read_json(path)).swept
    except (OSError, ValueError, AttributeError, TypeError):
        return False


def measure_rest(args: argparse.Namespace, runs: Path, run_dirs: list[Path], results: dict[str, Any]) -> None:
    measure_scale(args, runs, results)
    if not args.quick:
        rdzv.measure(args, runs, results, say)
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
    if args.store_model:   # its own date and command; every other figure kept
        return store_model_only(args)
    results: dict[str, Any] = (read_json(args.out / "results.json") if args.merge or args.storage or args.network
                               or args.dcp else {"recovery": {}, "skipped": {}})
    stamp = {"command": "make bench-quick" if args.quick else "make bench",
             "date": datetime.date.today().isoformat()}
    if args.storage:   # its own date and command; every other figure kept
        results["storage"] = measure_storage(args, runs, stamp)
        write(args.out, results, say)
        return 0
    if args.network:   # its own date and command; every other figure kept
        results["network"] = measure_network(args, runs, stamp)
        write(args.out, results, say)
        return 0
    if args.dcp:   # its own date and command; every other figure kept
        results["dcp"] = measure_dcp(args, runs, stamp)
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
        results["network"] = measure_network(args, runs, stamp)
        results["dcp"] = measure_dcp(args, runs, stamp)
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
    results: dict[str, Any] = read_json(path) if path.exists() else {}
    real: dict[str, Any] = {}  # the scale bench's real jobs, for the check only: its own table is kept
    measure_scale(args, runs, real)
    if "scale" in real:
        section = RdzvSection.of(results).updated(real=tuple(local_nodes.NodesRun.from_json(r) for r in real["scale"]))
        results[RDZV] = section.to_json()
    # each size into OUT/results.json as it ends: every other figure was read from it, nothing of it is lost
    rdzv.measure(args, runs, results, say, save=lambda r: write_json(r, args.out / "results.json"))
    write(args.out, results, say)
    return 0


def store_model_only(args: argparse.Namespace) -> int:
    """``--store-model``: the c10d store's costs and the model against the sweep, every other figure kept."""
    results = read_json(args.out / "results.json")
    results[store_model.KEY] = store_model.measure(say)
    write(args.out, results, say)
    return 0


def measure_storage(args: argparse.Namespace, runs: Path, stamp: dict[str, str]) -> dict[str, Any]:
    began = time.monotonic()
    command = "python -m bench --storage" + (" --quick" if args.quick else "") if args.storage else stamp["command"]
    return {**storage.measure(args.quick, runs, say), "date": stamp["date"], "command": command,
            "wall_s": round(time.monotonic() - began)}


def measure_network(args: argparse.Namespace, runs: Path, stamp: dict[str, str]) -> dict[str, Any]:
    began = time.monotonic()
    command = "python -m bench --network" + (" --quick" if args.quick else "") if args.network else stamp["command"]
    return {**network.measure(args.quick, runs, say), "date": stamp["date"], "command": command,
            "wall_s": round(time.monotonic() - began)}


def measure_dcp(args: argparse.Namespace, runs: Path, stamp: dict[str, str]) -> dict[str, Any]:
    began = time.monotonic()
    command = "python -m bench --dcp" + (" --quick" if args.quick else "") if args.dcp else stamp["command"]
    return {**dcp.measure(args.quick, runs, say), "date": stamp["date"], "command": command,
            "wall_s": round(time.monotonic() - began)}


def render(out: Path) -> int:
    results = read_results(out, "bench", "run `make bench` to measure")
    if results is None:
        return 2
    write(out, results, say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
