"""``elastic-chaos trace``: generate a trace of correlated preemption bursts, or check one you exported.

Without FILE it writes a generated trace (CSV, its parameters in the first
line) to stdout or ``-o``; with FILE it reads the trace as ``run replay
--trace FILE`` would and prints its schedule: each preemption's offset, when
it would hit after compression, and the job node slot it maps to. Exit 0, or
2 for a trace that cannot be read (the line and what is wrong are named).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_chaos.errors import SpecError
from elastic_chaos.faults.trace import Replaying
from elastic_chaos.options import MAX_NODES, add_arguments, given, option

DESCRIPTION = __doc__ + """
examples:
  elastic-chaos trace --bursts 3 --burst-size 2 --seed 7 -o bursts.csv
  elastic-chaos trace k8s-burst --compress 60 --replay-by group --max-nodes 2
  elastic-chaos run replay --trace bursts.csv --compress 60
"""


@dataclass(frozen=True)
class Schedule(Replaying):
    """What ``trace FILE`` shows a schedule for: the replay's compression and mapping, and the job's size."""

    max_nodes: int = option(2, "the job's largest node count (its slots); `run`'s --nodes is a range such as 1:2",
                            minimum=1, maximum=MAX_NODES)


def register(sub: Any) -> None:
    from elastic_chaos.faults.trace import Bursts
    p = sub.add_parser("trace", help="generate correlated preemption bursts, or check a trace for `run replay`",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", nargs="?", type=Path, metavar="FILE",
                   help="a trace to check (CSV: docs/FAULTS.md), or a bundled example's name (spot-3, k8s-burst)")
    p.add_argument("-o", "--output", type=Path, help="write the generated trace here (default: stdout)")
    add_arguments(p.add_argument_group("schedule of FILE"), Schedule)
    add_arguments(p.add_argument_group("generated bursts"), Bursts)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from elastic_chaos.faults.trace import Bursts, read_trace
    view = Schedule(**given(args, Schedule))
    if args.file is None:
        text = Bursts(**given(args, Bursts)).generate().to_csv()
        if args.output is None:
            print(text, end="")
        else:
            _write(args.output, text)
            print(f"wrote {args.output}")
        return 0
    trace = read_trace(args.file)
    slots = trace.slots(view.replay_by, view.max_nodes)
    print(f"{args.file}: {len(trace)} preemption(s) over {trace.preemptions[-1].offset_s:g} s; replayed at "
          f"--compress {view.compress:g}, by {view.replay_by.value} onto {view.max_nodes} node slot(s):")
    for p, slot in zip(trace.preemptions, slots, strict=True):
        hits = f"slot {slot}" if slot is not None else "newest node"
        print(f"  +{p.offset_s:10.1f} s -> +{p.offset_s / view.compress:7.1f} s  {hits:<11}  "
              f"{p.node or '-'}  {p.group or '-'}")
    return 0


def _write(path: Path, text: str) -> None:
    """Write the generated trace; SpecError (not a traceback) for a path that cannot take a file."""
    try:
        if path.is_dir():
            raise SpecError(f"cannot write the trace to {path}: it is a folder; give a file path (-o FILE)")
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot write the trace to {path} ({exc.strerror or exc}); give a file path in a folder "
                        "you can write (-o FILE)") from None
