"""``python -m bench.rdzv.sizes``: the sweep at chosen sizes on this machine, one JSON per size as it ends.

For a machine other than the one `make bench` runs on (bench/rdzv/large_sizes.sh on a lent machine's
cores): a lent machine may be taken back mid-sweep, so each size is written as soon as it ends, and the
figures are recorded apart from this repository's sweep by ``python -m bench.other_cores`` (other cores,
another torch build). Stops at the first size that broke; exit 1 then, 0 when every size completed, 2 on
bad input.

    python -m bench.rdzv.sizes --backend c10d --sizes 256,512 --json-dir OUT
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

from bench.rdzv.plan import UNDILATED_UP_TO
from bench.rdzv.records import SizeResult
from bench.rdzv.sweep import BACKENDS, sweep, where


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.rdzv.sizes", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=BACKENDS, default="c10d")
    p.add_argument("--sizes", required=True, help="comma-separated node counts, e.g. 256,512,1024")
    p.add_argument("--json-dir", type=Path, required=True, help="where rdzv-BACKEND-N.json go")
    p.add_argument("--steady-s", type=float, default=10.0, help="the steady-state window (default 10)")
    p.add_argument("--dilation", default="auto",
                   help=f"time dilation: a number >= 1 for every size, or auto (1 up to {UNDILATED_UP_TO} nodes, "
                        "then from the size before's harness CPU per node; see bench.rdzv.clock)")
    args = p.parse_args(argv)
    try:
        args.fixed = None if args.dilation == "auto" else float(args.dilation)
    except ValueError:
        p.error(f"--dilation {args.dilation!r}: a number >= 1, or auto")
    if args.fixed is not None and not args.fixed >= 1:
        p.error(f"--dilation {args.dilation!r}: a number >= 1 (1 = real time), or auto")
    try:
        args.node_counts = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        p.error(f"--sizes {args.sizes!r}: give node counts separated by commas, e.g. 256,512")
    if not args.node_counts or min(args.node_counts) < 2:
        p.error("--sizes: at least one node count, each 2 or more")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    args.json_dir.mkdir(parents=True, exist_ok=True)

    def keep(size: SizeResult) -> None:
        (args.json_dir / f"rdzv-{args.backend}-{size.nodes}.json").write_text(
            json.dumps({**dataclasses.asdict(where()), "backend": args.backend, "size": size.to_json()}, indent=1))
        print(f"{args.backend} {size.nodes}: wall {size.wall_s} s, broke: {size.broke}", flush=True)

    with tempfile.TemporaryDirectory(prefix="rdzv-scale-") as runs:
        swept = sweep(args.node_counts, (args.backend,), Path(runs), lambda m: print(m, flush=True),
                      steady_s=args.steady_s, dilation=args.fixed, on_size=keep)
    return 1 if any(s.broke for s in swept[args.backend]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
