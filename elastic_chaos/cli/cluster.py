"""``elastic-chaos cluster up|down|status|...``: the local multi-node Kubernetes cluster (docs/LOCAL-CLUSTER.md).

The same command line as ``python3 -m elastic_chaos.localcluster``
(what ``make cluster-up`` runs, stdlib only): this is it from the installed
tool. Root needed; exit 0 done, 1 failed, 2 setup error.
"""
from __future__ import annotations

import argparse
from typing import Any

EXAMPLES = """examples:
  elastic-chaos cluster up --nodes 4
  KUBECONFIG=.cluster/kubeconfig pytest scenarios/ --platform kubernetes
  elastic-chaos cluster lose-node ec-node-3
  elastic-chaos cluster down
"""


def register(sub: Any) -> None:
    p = sub.add_parser("cluster", help="a real multi-node Kubernetes cluster on this machine, no Docker (root)",
                       description=__doc__ + "\n" + EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("words", nargs=argparse.REMAINDER, help="up, down, status, add-node, lose-node NAME, "
                                                           "partition-node NAME, heal-node NAME, node-pids NAME, "
                                                           "deps (each with --help)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from elastic_chaos.localcluster.cli import main as cluster_main
    return cluster_main(args.words or ["--help"])
