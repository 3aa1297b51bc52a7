"""``elastic-chaos cluster``: a real multi-node Kubernetes 1.20 cluster on this machine, without Docker or a registry.

The command line of the local cluster (``make cluster-up`` / ``make cluster-down``
run ``python3 -m elastic_chaos.localcluster``, ``elastic-chaos cluster``
is the same). Stdlib only, so it runs under any Python 3.11 as root without the
toolkit's dependencies; the toolkit's node faults call :mod:`ops` directly
(through :mod:`elastic_chaos.platforms.kubernetes.machines`).

Exit codes: 0 done, 1 failed, 2 setup error (not root, a package or a build
missing: the message says what to run), 3 no cluster here (``status``, ``down``).

Everything a cluster makes on the host carries its own id (``status`` shows it),
and ``down`` removes only what its state records: never a bridge, chain,
cgroup or process of another cluster or of anyone else.

Examples::

    elastic-chaos cluster up --nodes 4       # blocks until 4 nodes are Ready
    export KUBECONFIG=.cluster/kubeconfig
    elastic-chaos cluster lose-node ec-node-2
    elastic-chaos cluster add-node           # prints the new node's name once Ready
    elastic-chaos cluster partition-node ec-node-3; elastic-chaos cluster heal-node ec-node-3
    elastic-chaos cluster down
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Callable, Sequence

from elastic_chaos.localcluster import deps as cluster_deps
from elastic_chaos.localcluster import ops
from elastic_chaos.localcluster.base import ClusterError, Layout
from elastic_chaos.localcluster.status import status


def _up(layout: Layout, args: argparse.Namespace) -> int:
    try:
        ops.up(layout, nodes=args.nodes, timeout_s=args.timeout)
    except ClusterError as exc:
        if exc.exit_code == 2:   # refused before it started anything
            raise
        # a half-made cluster is not left running (a failed CI run left its control plane up):
        # its logs are kept where `down` does not remove them, then everything it made goes
        kept = ops.keep_logs(layout)
        with contextlib.suppress(ops.NoCluster):   # failed before it recorded anything
            ops.down(layout)
        raise ClusterError(f"{exc}\ncluster up failed, so what it started was stopped and removed; its logs "
                           f"are kept in {kept}", exit_code=exc.exit_code) from exc
    return 0


def _down(layout: Layout, args: argparse.Namespace) -> int:
    cluster_deps.require_root()
    ops.down(layout)
    print("cluster down")
    return 0


def _status(layout: Layout, args: argparse.Namespace) -> int:
    cluster_deps.require_root()  # the state and the admin key are root's
    return status(layout, as_json=args.json)


def _add_node(layout: Layout, args: argparse.Namespace) -> int:
    print(ops.add_node(layout, wait=not args.no_wait, timeout_s=args.timeout))
    return 0


def _lose_node(layout: Layout, args: argparse.Namespace) -> int:
    cluster_deps.require_root()
    ops.lose_node(layout, args.name)
    return 0


def _partition(layout: Layout, args: argparse.Namespace) -> int:
    cluster_deps.require_root()
    ops.set_partition(layout, args.name, partitioned=True)
    return 0


def _heal(layout: Layout, args: argparse.Namespace) -> int:
    cluster_deps.require_root()
    ops.set_partition(layout, args.name, partitioned=False)
    return 0


def _freeze(layout: Layout, args: argparse.Namespace) -> int:
    cluster_deps.require_root()
    ops.set_frozen(layout, args.name, frozen=True)
    return 0


def _thaw(layout: Layout, args: argparse.Namespace) -> int:
    cluster_deps.require_root()
    ops.set_frozen(layout, args.name, frozen=False)
    return 0


def _node_pids(layout: Layout, args: argparse.Namespace) -> int:
    cluster_deps.require_root()
    pids = ops.node_pids(layout, args.name)
    if args.json:
        print(json.dumps({str(pid): comm for pid, comm in pids.items()}))
    else:
        print("\n".join(str(pid) for pid in pids))
    return 0


def _deps(layout: Layout, args: argparse.Namespace) -> int:
    if args.install:
        installed = cluster_deps.install()
        print(f"installed: {' '.join(installed)}" if installed else "all packages present")
        return 0
    missing = cluster_deps.missing_packages({**cluster_deps.RUNTIME, **cluster_deps.IMAGES})
    if missing:
        print(f"missing: {cluster_deps.apt_line(missing)}", file=sys.stderr)
        return 2
    print("all packages present")
    return 0


def _node_init(layout: Layout, args: argparse.Namespace) -> int:
    from elastic_chaos.localcluster import node as cluster_node

    return cluster_node.node_init(args.node_dir)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="elastic-chaos cluster", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("up", help="start the cluster (or complete it); blocks until every node is Ready")
    cmd.add_argument("--nodes", type=int, default=4, help="number of nodes (default 4: one on-demand, three spot)")
    cmd.add_argument("--timeout", type=float, default=ops.READY_TIMEOUT_S, help="seconds to wait for Ready")
    cmd.set_defaults(func=_up)
    sub.add_parser("down", help="stop everything and remove what up made, as its state records it (exit 3 and "
                                "nothing touched where there is no cluster)").set_defaults(func=_down)
    cmd = sub.add_parser("status", help="processes, links and Node readiness (exit 0 running, 1 a part of "
                                        "it dead, 3 no cluster)")
    cmd.add_argument("--json", action="store_true")
    cmd.set_defaults(func=_status)
    cmd = sub.add_parser("add-node", help="a new node joins; prints its name (once Ready unless --no-wait)")
    cmd.add_argument("--no-wait", action="store_true", help="return once started, not Ready")
    cmd.add_argument("--timeout", type=float, default=ops.READY_TIMEOUT_S)
    cmd.set_defaults(func=_add_node)
    for name, func, text in [
        ("lose-node", _lose_node, "the instance is gone: all its processes die at once, its Node is deleted"),
        ("partition-node", _partition, "its link down: cut from the API server and the other nodes"),
        ("heal-node", _heal, "its link up again"),
        ("freeze-node", _freeze, "every process of the node stopped at once (cgroup freezer): a hung host"),
        ("thaw-node", _thaw, "the node's processes resume"),
    ]:
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("name")
        cmd.set_defaults(func=func)
    cmd = sub.add_parser("node-pids", help="host PIDs of every process of the node, one a line")
    cmd.add_argument("name")
    cmd.add_argument("--json", action="store_true", help="{pid: command name}")
    cmd.set_defaults(func=_node_pids)
    cmd = sub.add_parser("deps", help="check the Debian packages (--install: apt-get what is missing)")
    cmd.add_argument("--install", action="store_true")
    cmd.set_defaults(func=_deps)
    cmd = sub.add_parser("_node-init")  # PID 1 of a node, started by up/add-node
    cmd.add_argument("node_dir")
    cmd.set_defaults(func=_node_init)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    progress = logging.StreamHandler(sys.stderr)
    progress.setFormatter(logging.Formatter("%(message)s"))
    ops.log.addHandler(progress)  # the operations' progress lines, as they happen
    ops.log.setLevel(logging.INFO)
    ops.log.propagate = False
    args = parser().parse_args(argv)
    func: Callable[[Layout, argparse.Namespace], int] = args.func
    try:
        return func(Layout(), args)
    except ClusterError as e:
        print(f"cluster: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("cluster: interrupted; `elastic-chaos cluster down` removes what was made", file=sys.stderr)
        return 1


