"""``elastic-chaos compare-final A B``: is checkpoint B the state checkpoint A says training should reach?

The final-state oracle on the command line (elastic_chaos.analysis.final_state):
A is the final checkpoint of a run without the fault (the reference), B the
final checkpoint of the run to judge, at the same step. They are compared
tensor by tensor, bitwise unless --tolerance is given, under a python with
torch (--python; default this one), in a child process bounded by --timeout.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

EXIT_EQUAL, EXIT_DIVERGED, EXIT_USAGE, EXIT_TOOLKIT = 0, 1, 2, 4

DESCRIPTION = __doc__ + """
A and B are torch.save files, torch.distributed.checkpoint folders (.metadata and
shards), or folders of the reference trainer's ckpt-<step>.pt saves (the newest
is taken; where they diverge, the earlier saves both folders hold are compared
too, to say from which step). Each differing value is put in a state class by its keys (model,
optimizer, LR scheduler, RNG, data position, gradient scaler); the one named is
the first of the most causal class, with its likely cause.

exit codes:
  0  final state: equal
  1  diverged (the state, the tensor and the likely cause are printed)
  2  bad input: a missing path, a file that is not a checkpoint, a python without torch
  4  the comparer failed or timed out

examples:
  elastic-chaos compare-final reports/ref/workdir/checkpoints reports/kill/workdir/checkpoints
  elastic-chaos compare-final clean/final.pt resumed/final.pt --tolerance 1e-6
  elastic-chaos compare-final ref/step-1000 run/step-1000 --python /opt/venv/bin/python --json
"""


def _tolerance(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"{text}: a tolerance is a finite number >= 0 (0: bitwise)")
    return v


def _timeout(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(v) or not 0 < v <= 86400:
        raise argparse.ArgumentTypeError(f"{text}: seconds above 0, at most a day")
    return v


def register(sub: Any) -> None:
    p = sub.add_parser("compare-final", help="compare two final checkpoints tensor by tensor (the final-state oracle)",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", type=Path, metavar="A", help="the reference run's final checkpoint (no fault)")
    p.add_argument("b", type=Path, metavar="B", help="the judged run's final checkpoint")
    p.add_argument("--tolerance", type=_tolerance, default=0.0,
                   help="largest absolute difference allowed per floating value (default 0: bitwise)")
    p.add_argument("--python", help="the python that loads the checkpoints, one with torch (default: this one)")
    p.add_argument("--trust", action="store_true", help="load files that pickle more than tensors and plain values "
                   "(runs their pickles: only for files you trust)")
    p.add_argument("--timeout", type=_timeout, default=300.0, help="seconds the comparison may take (default 300)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from elastic_chaos.analysis.final_state import ComparerFailed, compare_final, trace_back
    try:
        state = compare_final(args.a, args.b, tolerance=args.tolerance, python=args.python, trust=args.trust,
                              timeout_s=args.timeout)
        state = trace_back(state, args.a, args.b, tolerance=args.tolerance, python=args.python, trust=args.trust,
                           timeout_s=args.timeout)
    except ComparerFailed as exc:
        print(f"elastic-chaos: error: {exc}")
        return EXIT_TOOLKIT
    if args.json:
        print(json.dumps(state.to_json(), indent=2))
    else:
        print(state.describe())
        for d in state.divergences[1:]:
            print(f"  also: {d.describe()}")
    return EXIT_EQUAL if state.equal else EXIT_DIVERGED
