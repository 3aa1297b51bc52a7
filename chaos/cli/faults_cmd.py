"""``elastic-chaos faults``: list the fault catalog, per place it runs."""
from __future__ import annotations

import argparse
from typing import Any

DESCRIPTION = """List the faults, with a one-line description each, grouped by where they run:
the local platform (`elastic-chaos run FAULT`), any Kubernetes cluster (scenarios with
--platform kubernetes/kind, `elastic-chaos gameday`), and AWS (`elastic-chaos gameday`).

example:
  elastic-chaos faults
"""


def register(sub: Any) -> None:
    p = sub.add_parser("faults", help="list the faults with a one-line description each",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from chaos.experiments import EXPERIMENTS
    from chaos.faults.aws import AWS_FAULTS
    from chaos.faults.kubernetes import KUBERNETES_FAULTS
    groups = [
        ("local platform: elastic-chaos run FAULT (docs/FAULTS.md)",
         {name: description for name, (_, description) in EXPERIMENTS.items()}),
        ("Kubernetes (kind or any cluster): scenarios, elastic-chaos gameday (docs/KUBERNETES.md)",
         {name: cls.description for name, cls in KUBERNETES_FAULTS.items()}),
        ("AWS (EKS game days): elastic-chaos gameday (docs/EKS.md)",
         {name: cls.description for name, cls in AWS_FAULTS.items()}),
    ]
    width = max(len(name) for _, faults in groups for name in faults)
    for i, (title, faults) in enumerate(groups):
        print(("\n" if i else "") + title)
        for name, description in faults.items():
            print(f"  {name.ljust(width)}  {description}")
    return 0
