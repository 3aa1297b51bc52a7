"""``elastic-chaos faults``: list the fault catalog."""
from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("faults", help="list the faults with a one-line description each",
                       description="List the faults `elastic-chaos run FAULT` accepts.")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from chaos.faults import FAULTS
    width = max(len(k) for k in FAULTS)
    for name, cls in FAULTS.items():
        print(f"{name.ljust(width)}  {cls.description}")
    return 0
