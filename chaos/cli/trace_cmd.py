"""``elastic-chaos trace``: generate a trace of correlated preemption bursts, or check one you exported.

Without FILE it writes a generated trace (CSV, its parameters in the first
line) to stdout or ``-o``; with FILE it reads the trace as ``run replay
--trace FILE`` would and prints its schedule: each preemption's offset, when
it would hit after compression, and the job node slot it maps to. Exit 0, or
2 for a trace that cannot be read (the line and what is wrong are named).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

DESCRIPTION = __doc__ + """
examples:
  elastic-chaos trace --bursts 3 --burst-size 2 --seed 7 -o bursts.csv
  elastic-chaos trace k8s-burst --compress 60 --replay-by group --max-nodes 2
  elastic-chaos run replay --trace bursts.csv --compress 60
"""


def register(sub: Any) -> None:
    from chaos.faults.trace import Bursts, ReplayBy
    from chaos.options import add_arguments
    p = sub.add_parser("trace", help="generate correlated preemption bursts, or check a trace for `run replay`",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", nargs="?", type=Path, metavar="FILE",
                   help="a trace to check (CSV: docs/FAULTS.md), or a bundled example's name (spot-3, k8s-burst)")
    p.add_argument("-o", "--output", type=Path, help="write the generated trace here (default: stdout)")
    p.add_argument("--compress", type=float, default=30.0, help="time compression to show (default 30)")
    p.add_argument("--replay-by", choices=[b.value for b in ReplayBy], default=ReplayBy.NODE.value,
                   help="how preemptions map onto node slots (default node)")
    p.add_argument("--max-nodes", type=int, default=2, help="the job's largest node count (its slots); `run`'s "
                   "--nodes is a range such as 1:2 (default 2)")
    add_arguments(p.add_argument_group("generated bursts"), Bursts)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from chaos.errors import SpecError
    from chaos.faults.trace import Bursts, ReplayBy, read_trace
    from chaos.options import given
    if args.compress <= 0 or args.max_nodes < 1:
        raise SpecError("--compress must be > 0 and --max-nodes >= 1")
    if args.file is None:
        text = Bursts(**given(args, Bursts)).generate().to_csv()
        if args.output is None:
            print(text, end="")
        else:
            args.output.write_text(text)
            print(f"wrote {args.output}")
        return 0
    trace = read_trace(args.file)
    slots = trace.slots(ReplayBy(args.replay_by), args.max_nodes)
    print(f"{args.file}: {len(trace)} preemption(s) over {trace.preemptions[-1].offset_s:g} s; replayed at "
          f"--compress {args.compress:g}, by {args.replay_by} onto {args.max_nodes} node slot(s):")
    for p, slot in zip(trace.preemptions, slots, strict=True):
        hits = f"slot {slot}" if slot is not None else "newest node"
        print(f"  +{p.offset_s:10.1f} s -> +{p.offset_s / args.compress:7.1f} s  {hits:<11}  "
              f"{p.node or '-'}  {p.group or '-'}")
    return 0
