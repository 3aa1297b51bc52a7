"""The host side of the cluster network: one bridge, a veth per node, routes, a few iptables rules.

Topology (no host IP forwarding is switched on, nothing is routed to or from
the machine's external interface)::

    host: bridge ec<id>br 10.87.0.1/24 ── veth ec<id>v<k> ──┐
                                                            │ (node k's network namespace)
                                     eth0 10.87.0.<10+k>/24 ┘── cni0 10.88.<k>.1/24 ── pods 10.88.<k>.x

* Pod to pod across nodes: every node routes each other node's pod /24 via
  that node's eth0 address; frames are switched by the host bridge. Nodes have
  no default route: nothing outside the cluster is reachable from a pod.
* Pods and kubelets to the API server: ``10.87.0.1:16443`` is DNATed on the host
  to the API server on ``127.0.0.1:16443`` (``route_localnet`` on the bridge
  only), so the API server listens on loopback alone. Inside each node,
  ``10.96.0.1:443`` (the ``kubernetes`` Service, what in-cluster clients use) is
  DNATed to ``10.87.0.1:16443``: the one ClusterIP that works without kube-proxy.
* The host answers nodes and pods on the API port and the metadata ports only (plus ICMP
  and replies): a run's spot-notice stand-in listens on ``10.87.0.1`` there.

Every name carries the cluster's id (:mod:`names`): the jumps into our chains are
recorded in the state before they are made, and teardown removes exactly the
recorded jumps, our own chains, the recorded nodes' veths and our bridge, never
anything found by a pattern. The ranges are the same for every cluster, so two
cannot run at once: :func:`foreign_holders` says who holds them, for ``up`` to refuse.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import logging
from pathlib import Path
from typing import Any

from elastic_chaos.localcluster.base import (
    API_PORT,
    HOST_IP,
    HOST_NET,
    KUBERNETES_SERVICE_IP,
    METADATA_PORTS,
    POD_NETS,
    SERVICE_NET,
    ClusterError,
    NodeAddr,
    run,
)
from elastic_chaos.localcluster.names import ALIAS_PREFIX, HostNames

log = logging.getLogger(__name__)

Rule = list[str]
"""``[table, chain, *rule]``: one iptables rule, as recorded in the state."""


def chain_rules(names: HostNames) -> list[Rule]:
    """The rules of our own chains (``names``' chains, made and removed whole)."""
    return [
        ["nat", names.nat_chain, "-d", f"{HOST_IP}/32", "-p", "tcp", "--dport", str(API_PORT),
         "-j", "DNAT", "--to-destination", f"127.0.0.1:{API_PORT}"],
        ["filter", names.in_chain, "-p", "tcp", "--dport", str(API_PORT), "-j", "ACCEPT"],
        ["filter", names.in_chain, "-d", f"{HOST_IP}/32", "-p", "tcp", "--dport", "{}:{}".format(*METADATA_PORTS),
         "-j", "ACCEPT"],
        ["filter", names.in_chain, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
        ["filter", names.in_chain, "-p", "icmp", "-j", "ACCEPT"],
        ["filter", names.in_chain, "-j", "DROP"],
        ["filter", names.fwd_chain, "-i", names.bridge, "-o", names.bridge, "-j", "ACCEPT"],
        ["filter", names.fwd_chain, "-j", "DROP"],
    ]


def jumps(names: HostNames) -> list[Rule]:
    """The jumps from the built-in chains into ours: only traffic of our bridge, each with our comment."""
    comment = ["-m", "comment", "--comment", names.comment]
    return [
        ["nat", "PREROUTING", "-i", names.bridge, *comment, "-j", names.nat_chain],
        ["filter", "INPUT", "-i", names.bridge, *comment, "-j", names.in_chain],
        ["filter", "FORWARD", "-i", names.bridge, *comment, "-j", names.fwd_chain],
        ["filter", "FORWARD", "-o", names.bridge, *comment, "-j", names.fwd_chain],
    ]


def chains(names: HostNames) -> list[tuple[str, str]]:
    """(table, chain) of each chain of ours."""
    return sorted({(r[0], r[1]) for r in chain_rules(names)})


def ipt(table: str, *args: str, check: bool = True) -> bool:
    """One iptables call (waits for the xtables lock); True when it succeeded."""
    try:
        run(["iptables", "-w", "5", "-t", table, *args], check=True, quiet=not check)
    except ClusterError as exc:
        if check or exc.exit_code == 2:   # iptables itself missing: never taken for "nothing to remove"
            raise
        return False
    return True


def link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def link_alias(name: str) -> str:
    """The link's alias ('' when none or no such link)."""
    try:
        return Path(f"/sys/class/net/{name}/ifalias").read_text().strip()
    except OSError:
        return ""


def host_record(names: HostNames) -> dict[str, Any]:
    """What :func:`setup_host` will make, for the state (saved before anything is made)."""
    return {"bridge": names.bridge, "jumps": jumps(names)}


def setup_host(names: HostNames, root: Path) -> None:
    """Bridge (its alias says whose it is) + address + route_localnet + our iptables chains and the
    jumps into them, every name carrying the cluster's id. The caller records :func:`host_record` first."""
    if not link_exists(names.bridge):
        run(["ip", "link", "add", names.bridge, "type", "bridge"])
    run(["ip", "link", "set", "dev", names.bridge, "alias", names.alias(root)])
    run(["ip", "addr", "replace", f"{HOST_IP}/{HOST_NET.prefixlen}", "dev", names.bridge])
    run(["ip", "link", "set", names.bridge, "up"])
    Path(f"/proc/sys/net/ipv4/conf/{names.bridge}/route_localnet").write_text("1")
    make_chains(names)


def make_chains(names: HostNames) -> None:
    """Our chains, their rules, and the jumps into them from the built-in chains."""
    for table, chain in chains(names):
        ipt(table, "-N", chain)
    for table, chain, *rule in chain_rules(names):
        ipt(table, "-A", chain, *rule)
    for table, chain, *rule in jumps(names):
        ipt(table, "-I", chain, "1", *rule)


def recorded_jumps(state: dict[str, Any]) -> list[Rule]:
    """The jumps the state says this cluster made (a state from before ids: the fixed ones of then)."""
    host_net = state.get("host_net")
    if isinstance(host_net, dict):
        return [list(map(str, rule)) for rule in host_net.get("jumps", [])]
    return jumps(HostNames.legacy()) if host_net else []


def teardown_iptables(state: dict[str, Any]) -> None:
    """Remove the recorded jumps (each exact rule, every copy, bounded) and our own chains. Idempotent.
    A rule or chain of any other name is never touched."""
    names = HostNames.of(state)
    for table, chain, *rule in recorded_jumps(state):
        for _ in range(20):
            if not ipt(table, "-D", chain, *rule, check=False):
                break
    if state.get("host_net"):
        for table, chain in chains(names):
            ipt(table, "-F", chain, check=False)
            ipt(table, "-X", chain, check=False)


def teardown_host(state: dict[str, Any]) -> None:
    """Our iptables rules, the recorded nodes' veths and our bridge (its routes go with it). Idempotent."""
    names = HostNames.of(state)
    teardown_iptables(state)
    for rec in state["nodes"].values():
        veth = names.veth(int(rec["index"]))
        if link_exists(veth):
            run(["ip", "link", "del", veth], check=False)
    if state.get("host_net") and link_exists(names.bridge):
        run(["ip", "link", "del", names.bridge], check=False)


def foreign_holders(names: HostNames | None = None) -> list[str]:
    """Links and routes of this machine in the cluster's address ranges (the bridge network
    HOST_NET, the pod ranges POD_NETS) that are not ``names``' bridge: who holds them, in words.
    Empty: a cluster here can use them."""
    ours = names.bridge if names else None
    ranges = (HOST_NET, POD_NETS)
    found: dict[str, str] = {}
    for link in json.loads(run(["ip", "-j", "-4", "addr", "show"]) or "[]"):
        dev = str(link.get("ifname"))
        for addr in link.get("addr_info") or []:
            net = ipaddress.ip_network(f"{addr['local']}/{addr['prefixlen']}", strict=False)
            if dev != ours and any(net.overlaps(r) for r in ranges):
                found.setdefault(dev, f"{dev} has {addr['local']}/{addr['prefixlen']}")
    for route in json.loads(run(["ip", "-j", "-4", "route", "show"]) or "[]"):
        dst, dev = str(route.get("dst")), str(route.get("dev"))
        with contextlib.suppress(ValueError):
            if dst != "default" and dev != ours and any(ipaddress.ip_network(dst).overlaps(r) for r in ranges):
                found.setdefault(dev, f"{dev} routes {dst}")
    return [f"{what} ({_whose(dev)})" for dev, what in sorted(found.items())]


def _whose(dev: str) -> str:
    alias = link_alias(dev)
    if alias.startswith(ALIAS_PREFIX):
        cluster_id, _, root = alias[len(ALIAS_PREFIX):].partition(" ")
        return (f"the local cluster {cluster_id} at {root}: `ELASTIC_CHAOS_CLUSTER_DIR={root} elastic-chaos "
                "cluster down` stops it")
    return "not a cluster with an id: an older checkout's cluster, or something else"


def in_netns(pid: int, *args: str, check: bool = True) -> str:
    """Run a command in the network namespace of host PID ``pid``."""
    return run(["nsenter", f"--net=/proc/{pid}/ns/net", "--", *args], check=check)


def wire_node(addr: NodeAddr, names: HostNames, init_pid: int, peers: dict[NodeAddr, int]) -> None:
    """veth into the node's namespace, its addresses, and pod routes both ways to every peer node."""
    veth = names.veth(addr.index)
    if link_exists(veth):   # ours (the name carries our id): left by an earlier attempt
        run(["ip", "link", "del", veth])
    run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", str(init_pid)])
    run(["ip", "link", "set", veth, "master", names.bridge])
    run(["ip", "link", "set", veth, "up"])
    in_netns(init_pid, "ip", "link", "set", "lo", "up")
    in_netns(init_pid, "ip", "addr", "add", f"{addr.ip}/{HOST_NET.prefixlen}", "dev", "eth0")
    in_netns(init_pid, "ip", "link", "set", "eth0", "up")
    # No default route: anything off the cluster fails at once (ENETUNREACH) instead of timing out,
    # which saves the kubelet ~11 s of start-up (a DNS lookup, the AWS credential provider's metadata probe).
    # The service range is routed to the host so that hostNetwork pods reach 10.96.0.1 (DNATed in the node).
    in_netns(init_pid, "ip", "route", "add", SERVICE_NET, "via", HOST_IP)
    run(["ip", "route", "replace", addr.pod_cidr, "via", addr.ip, "dev", names.bridge])
    for peer, peer_pid in peers.items():
        in_netns(init_pid, "ip", "route", "replace", peer.pod_cidr, "via", peer.ip)
        in_netns(peer_pid, "ip", "route", "replace", addr.pod_cidr, "via", addr.ip, check=False)


def unwire_node(addr: NodeAddr, names: HostNames, peers: dict[NodeAddr, int]) -> None:
    """Remove the node's veth, its host route (only the one through our bridge) and the peers'
    routes to its pods. Idempotent."""
    veth = names.veth(addr.index)
    if link_exists(veth):
        run(["ip", "link", "del", veth], check=False)
    if link_exists(names.bridge):
        run(["ip", "route", "del", addr.pod_cidr, "via", addr.ip, "dev", names.bridge], check=False)
    for peer_pid in peers.values():
        in_netns(peer_pid, "ip", "route", "del", addr.pod_cidr, check=False)


def set_link(addr: NodeAddr, names: HostNames, up: bool) -> None:
    """The node's link up or down (a partition cuts it from the API server and every other node)."""
    veth = names.veth(addr.index)
    if not link_exists(veth):
        raise ClusterError(f"{addr.name} has no link {veth}: is it running? see `elastic-chaos cluster status`")
    run(["ip", "link", "set", veth, "up" if up else "down"])


@dataclasses.dataclass(frozen=True)
class NodeLink:
    """Where one node's traffic with the other nodes can be shaped (a link fault's end): its
    network namespace, its address there, the pod range it routes, its veth on the host bridge."""

    name: str
    netns: str
    """The namespace file of the node's init (``/proc/PID/ns/net``): valid while the node runs."""
    address: str
    pod_cidr: str
    host_veth: str


def node_link(addr: NodeAddr, names: HostNames, init_pid: int) -> NodeLink:
    """The link of the node numbered ``addr`` whose init runs as host PID ``init_pid``."""
    return NodeLink(addr.name, f"/proc/{init_pid}/ns/net", addr.ip, addr.pod_cidr, names.veth(addr.index))


def link_up(addr: NodeAddr, names: HostNames) -> bool | None:
    """True/False for the node's host link state; None when there is no link."""
    try:
        flags = int(Path(f"/sys/class/net/{names.veth(addr.index)}/flags").read_text(), 16)
    except OSError:
        return None
    return bool(flags & 0x1)


NODE_NAT_RULES = [
    [chain, "-d", f"{KUBERNETES_SERVICE_IP}/32", "-p", "tcp", "--dport", "443",
     "-j", "DNAT", "--to-destination", f"{HOST_IP}:{API_PORT}"]
    for chain in ("PREROUTING", "OUTPUT")
]
