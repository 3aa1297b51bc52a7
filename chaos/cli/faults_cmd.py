"""``elastic-chaos faults``: list the fault catalog."""
from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("faults", help="list the faults with a one-line description each",
                       description="List the faults `elastic-chaos run FAULT` accepts.")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from chaos.experiments import EXPERIMENTS
    width = max(len(k) for k in EXPERIMENTS)
    for name, (_, description) in EXPERIMENTS.items():
        print(f"{name.ljust(width)}  {description}")
    return 0
