"""What the storage mount costs a save, and what its rules make a save cost.

``python -m bench.storagefs [--sizes 8,64] [--reps 5] [--json OUT]`` (root and /dev/fuse):

- passthrough overhead: a checkpoint saved the way the reference trainer saves
  it (temporary file, ``torch.save``, fsync, rename, fsync of the folder) into a
  plain folder and into the same kind of folder behind the storage mount, and
  loaded back; median seconds, MB/s, and the mount's ratio to the plain folder;
- the save under rules: a per-op latency (every op of the save waits it) and a
  throughput cap, against what the rule alone would predict.

Not part of ``make bench``; prints its figures and, with ``--json``, writes them.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from elastic_chaos.storagefs import Kind, Latency, StorageFs, Throttle, unavailable


def save(folder: Path, payload: dict[str, torch.Tensor], name: str = "ckpt.pt") -> float:
    """Seconds for one save as elastic_chaos/trainer/checkpoint.py does it."""
    began = time.perf_counter()
    tmp = folder / f".{name}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(payload, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / name)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - began


def load(folder: Path, name: str = "ckpt.pt") -> float:
    began = time.perf_counter()
    torch.load(folder / name)
    return time.perf_counter() - began


def median_of(reps: int, fn: Callable[[], float]) -> float:
    return statistics.median(fn() for _ in range(reps))


def payload(size_mb: int) -> dict[str, torch.Tensor]:
    return {"w": torch.randn(size_mb * 1024 * 1024 // 4)}


def overhead(size_mb: int, reps: int, root: Path) -> dict[str, Any]:
    data = payload(size_mb)
    plain, behind = root / f"plain-{size_mb}", root / f"mounted-{size_mb}"
    plain.mkdir()
    behind.mkdir()
    plain_save = median_of(reps, lambda: save(plain, data))
    plain_load = median_of(reps, lambda: load(plain))
    with StorageFs(behind, workdir=root / f"storage-{size_mb}"):
        fuse_save = median_of(reps, lambda: save(behind, data))
        fuse_load = median_of(reps, lambda: load(behind))
    mb = size_mb * 1.048576
    return {"size_mb": size_mb, "reps": reps,
            "plain_save_s": round(plain_save, 4), "fuse_save_s": round(fuse_save, 4),
            "plain_save_mb_s": round(mb / plain_save, 1), "fuse_save_mb_s": round(mb / fuse_save, 1),
            "save_ratio": round(fuse_save / plain_save, 2),
            "plain_load_s": round(plain_load, 4), "fuse_load_s": round(fuse_load, 4),
            "load_ratio": round(fuse_load / plain_load, 2)}


def under_rules(size_mb: int, reps: int, root: Path, delay_s: float, cap_mb_s: float) -> dict[str, Any]:
    data = payload(size_mb)
    folder = root / f"ruled-{size_mb}"
    folder.mkdir()
    with StorageFs(folder, workdir=root / f"storage-ruled-{size_mb}") as fs:
        base = median_of(reps, lambda: save(folder, data))
        name = fs.set_rule(Latency(delay_s, ops=frozenset({Kind.CREATE, Kind.WRITE, Kind.FSYNC, Kind.FSYNCDIR,
                                                           Kind.RENAME, Kind.FLUSH})))
        slow = median_of(reps, lambda: save(folder, data))
        fs.clear_rule(name)
        released = [r for r in fs.ops() if r.op == "release" and r.writes]
        writes = (released[-1].writes or 0) if released else 0  # the last save's write requests
        fs.set_rule(Throttle(cap_mb_s * 1e6))
        capped = median_of(max(1, reps // 2), lambda: save(folder, data))
    size_b = size_mb * 1024 * 1024
    return {"size_mb": size_mb, "reps": reps, "unruled_save_s": round(base, 4),
            "latency_s_per_op": delay_s, "writes_per_save": writes, "latency_save_s": round(slow, 4),
            "latency_added_s": round(slow - base, 4),
            # create, the writes, flush (close), fsync, rename, the folder's fsync: each waits once
            "latency_of_the_rule_s": round(delay_s * (writes + 5), 4),
            "cap_mb_s": cap_mb_s, "capped_save_s": round(capped, 4),
            "cap_floor_s": round(size_b / (cap_mb_s * 1e6), 4)}


def run(sizes: list[int], reps: int, delay_s: float = 0.005, cap_mb_s: float = 100.0) -> dict[str, Any]:
    """Every figure of this bench; SystemExit with the reason where no mount can be made."""
    reason = unavailable()
    if reason:
        raise SystemExit(f"bench.storagefs needs a FUSE mount: {reason}")
    with tempfile.TemporaryDirectory(prefix="bench-storagefs-") as tmp:
        root = Path(tmp)
        return {"load_avg_1m": round(os.getloadavg()[0], 2),
                "overhead": [overhead(s, reps, root) for s in sizes],
                "rules": under_rules(max(sizes), reps, root, delay_s, cap_mb_s)}


def show(figures: dict[str, Any]) -> None:
    print(f"storage mount overhead (load average {figures['load_avg_1m']}):")
    print(f"{'size':>6} {'plain save':>11} {'mount save':>11} {'ratio':>6} {'plain MB/s':>11} {'mount MB/s':>11}"
          f" {'plain load':>11} {'mount load':>11} {'ratio':>6}")
    for o in figures["overhead"]:
        print(f"{o['size_mb']:>4}MB {o['plain_save_s']:>10.3f}s {o['fuse_save_s']:>10.3f}s {o['save_ratio']:>6}"
              f" {o['plain_save_mb_s']:>11} {o['fuse_save_mb_s']:>11} {o['plain_load_s']:>10.3f}s"
              f" {o['fuse_load_s']:>10.3f}s {o['load_ratio']:>6}")
    r = figures["rules"]
    print(f"a {r['size_mb']} MB save under rules: unruled {r['unruled_save_s']:.3f}s; "
          f"{r['latency_s_per_op'] * 1000:g} ms per op: {r['latency_save_s']:.3f}s, {r['latency_added_s']:+.3f}s "
          f"({r['writes_per_save']} writes + 5 ops = {r['latency_of_the_rule_s']:.3f}s of delay); "
          f"capped at {r['cap_mb_s']:g} MB/s: {r['capped_save_s']:.3f}s (the cap alone: {r['cap_floor_s']:.3f}s)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.storagefs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="8,64", help="checkpoint sizes in MB, comma-separated")
    p.add_argument("--reps", type=int, default=5, help="saves per figure (the median is reported)")
    p.add_argument("--delay-ms", type=float, default=5.0, help="the latency rule's delay per op")
    p.add_argument("--cap-mb-s", type=float, default=100.0, help="the throughput cap's MB/s")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    figures = run([int(s) for s in args.sizes.split(",")], args.reps, args.delay_ms / 1000, args.cap_mb_s)
    show(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
