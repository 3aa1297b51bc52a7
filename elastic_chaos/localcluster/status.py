"""``elastic-chaos cluster status``: the recorded processes, each node's link and readiness, in text or JSON.

Read only: takes no lock and changes nothing. Exit code 0 when every recorded
component runs and every node is Ready, 1 otherwise, 0 with "down" when there
is no cluster.
"""

from __future__ import annotations

import json
from typing import Any

from elastic_chaos.localcluster import net, node
from elastic_chaos.localcluster.api import Api
from elastic_chaos.localcluster.base import (
    ClusterError,
    Layout,
    NodeAddr,
    is_alive,
    load_state,
    node_index,
)
from elastic_chaos.localcluster.control import COMPONENTS
from elastic_chaos.localcluster.names import HostNames


def collect(layout: Layout) -> dict[str, Any]:
    """The cluster as a dict: components {name: {pid, alive}}, nodes {name: {...}}, kubeconfig, image."""
    state = load_state(layout)
    names = HostNames.of(state)
    ready: dict[str, bool] = {}
    api_error = ""
    if is_alive(state["procs"].get("kube-apiserver")):
        try:
            ready = Api(layout).node_ready()
        except ClusterError as e:
            api_error = str(e)
    nodes = {}
    for name in sorted(state["nodes"], key=node_index):
        rec, addr = state["nodes"][name], NodeAddr(node_index(name))
        mem = node.memory_bytes(names.cgroup_parent, name)
        nodes[name] = {
            "ip": addr.ip, "pod_cidr": addr.pod_cidr, "link": names.veth(addr.index),
            "init_pid": rec.get("init", {}).get("pid"), "alive": is_alive(rec.get("init")),
            "link_up": net.link_up(addr, names), "ready": ready.get(name),
            "memory_pss_mb": round(mem / 2**20),
        }
    trainer_ref = layout.images / "trainer.ref"
    return {
        "up": bool(state["procs"]),
        "id": state.get("id"),
        "kubeconfig": str(layout.kubeconfig),
        "trainer_image": trainer_ref.read_text().strip() if trainer_ref.exists() else None,
        "components": {c: {"pid": state["procs"].get(c, {}).get("pid"), "alive": is_alive(state["procs"].get(c))}
                       for c in COMPONENTS},
        "nodes": nodes,
        "unregistered": sorted(set(ready) - set(nodes)),
        "api_error": api_error,
    }


STATUS_DOWN = 3
"""status's exit code when no cluster runs."""


def status(layout: Layout, as_json: bool = False) -> int:
    info = collect(layout)
    healthy = all(c["alive"] for c in info["components"].values()) and all(
        n["alive"] and n["ready"] for n in info["nodes"].values())
    down = not info["up"] and not info["nodes"]
    if as_json:
        print(json.dumps(info, indent=1))
    elif down:
        print("cluster down")
    else:
        print(f"cluster {info['id'] or '(no id: started before ids)'}   kubeconfig {info['kubeconfig']}   "
              f"trainer image {info['trainer_image']}")
        for comp, c in info["components"].items():
            print(f"{comp:24} pid {c['pid']!s:>8}  {'running' if c['alive'] else 'DEAD'}")
        for name, n in info["nodes"].items():
            link = {True: "up", False: "DOWN (partitioned)", None: "none"}[n["link_up"]]
            ready = {True: "Ready", False: "NotReady", None: "not registered"}[n["ready"]]
            print(f"{name:12} {n['ip']:13} pods {n['pod_cidr']:15} init pid {n['init_pid']!s:>8} "
                  f"{'running' if n['alive'] else 'DEAD':8} link {link:18} {ready:14} {n['memory_pss_mb']} MB PSS")
        if info["unregistered"]:
            print(f"Node objects without a node process: {', '.join(info['unregistered'])}")
        if info["api_error"]:
            print(info["api_error"])
    # 0 running and healthy, 1 running with a dead part, 3 not running (systemctl's "inactive"):
    # `make cluster-test` brings a cluster up unless this says 0
    return STATUS_DOWN if down else 0 if healthy else 1
