"""The host side of the cluster network: one bridge, a veth per node, routes, a few iptables rules.

Topology (no host IP forwarding is switched on, nothing is routed to or from
the machine's external interface)::

    host: bridge eck8s0 10.87.0.1/24 ── veth eck8sv<k> ──┐
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

Every rule made is recorded in the state, and removed from it by ``teardown``.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

from chaos.platforms.kubernetes.localcluster.base import (
    API_PORT,
    BRIDGE,
    HOST_IP,
    HOST_NET,
    KUBERNETES_SERVICE_IP,
    METADATA_PORTS,
    SERVICE_NET,
    VETH_PREFIX,
    ClusterError,
    NodeAddr,
    run,
)

log = logging.getLogger(__name__)

NAT_CHAIN = "ELASTIC-CHAOS-K8S"
IN_CHAIN = "ELASTIC-CHAOS-K8S-IN"
FWD_CHAIN = "ELASTIC-CHAOS-K8S-FWD"
COMMENT = ["-m", "comment", "--comment", "elastic-chaos local cluster"]

# (table, chain, rule) appended to our own chains, then the jumps into them
CHAIN_RULES: list[tuple[str, str, list[str]]] = [
    ("nat", NAT_CHAIN, ["-d", f"{HOST_IP}/32", "-p", "tcp", "--dport", str(API_PORT),
                        "-j", "DNAT", "--to-destination", f"127.0.0.1:{API_PORT}"]),
    ("filter", IN_CHAIN, ["-p", "tcp", "--dport", str(API_PORT), "-j", "ACCEPT"]),
    ("filter", IN_CHAIN, ["-d", f"{HOST_IP}/32", "-p", "tcp", "--dport", "{}:{}".format(*METADATA_PORTS),
                          "-j", "ACCEPT"]),
    ("filter", IN_CHAIN, ["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"]),
    ("filter", IN_CHAIN, ["-p", "icmp", "-j", "ACCEPT"]),
    ("filter", IN_CHAIN, ["-j", "DROP"]),
    ("filter", FWD_CHAIN, ["-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT"]),
    ("filter", FWD_CHAIN, ["-j", "DROP"]),
]
JUMPS: list[tuple[str, str, list[str]]] = [
    ("nat", "PREROUTING", ["-i", BRIDGE, *COMMENT, "-j", NAT_CHAIN]),
    ("filter", "INPUT", ["-i", BRIDGE, *COMMENT, "-j", IN_CHAIN]),
    ("filter", "FORWARD", ["-i", BRIDGE, *COMMENT, "-j", FWD_CHAIN]),
    ("filter", "FORWARD", ["-o", BRIDGE, *COMMENT, "-j", FWD_CHAIN]),
]


def ipt(table: str, *args: str, check: bool = True) -> bool:
    """One iptables call (waits for the xtables lock); True when it succeeded."""
    try:
        run(["iptables", "-w", "5", "-t", table, *args], check=True, quiet=not check)
    except ClusterError:
        if check:
            raise
        return False
    return True


def link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def setup_host(state: dict[str, Any]) -> None:
    """Bridge + address + route_localnet + our iptables chains. Idempotent (re-made from scratch)."""
    state["host_net"] = True  # recorded before anything is made: teardown undoes whatever exists
    teardown_iptables()
    if not link_exists(BRIDGE):
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    run(["ip", "addr", "replace", f"{HOST_IP}/{HOST_NET.prefixlen}", "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"])
    Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/route_localnet").write_text("1")
    for table, chain in {(t, c) for t, c, _ in CHAIN_RULES}:
        ipt(table, "-N", chain)
    for table, chain, rule in CHAIN_RULES:
        ipt(table, "-A", chain, *rule)
    for table, chain, rule in JUMPS:
        ipt(table, "-I", chain, "1", *rule)


def teardown_iptables() -> None:
    """Remove our jumps and chains (every copy of a jump, bounded). Idempotent."""
    for table, chain, rule in JUMPS:
        for _ in range(20):
            if not ipt(table, "-D", chain, *rule, check=False):
                break
    for table, chain in sorted({(t, c) for t, c, _ in CHAIN_RULES}):
        ipt(table, "-F", chain, check=False)
        ipt(table, "-X", chain, check=False)


def teardown_host() -> None:
    """iptables rules, every veth of ours and the bridge (its routes go with it). Idempotent."""
    teardown_iptables()
    with contextlib.suppress(OSError):
        for dev in sorted(Path("/sys/class/net").iterdir()):
            if dev.name.startswith(VETH_PREFIX) and dev.name[len(VETH_PREFIX):].isdigit():
                run(["ip", "link", "del", dev.name], check=False)
    if link_exists(BRIDGE):
        run(["ip", "link", "del", BRIDGE], check=False)


def in_netns(pid: int, *args: str, check: bool = True) -> str:
    """Run a command in the network namespace of host PID ``pid``."""
    return run(["nsenter", f"--net=/proc/{pid}/ns/net", "--", *args], check=check)


def wire_node(addr: NodeAddr, init_pid: int, peers: dict[NodeAddr, int]) -> None:
    """veth into the node's namespace, its addresses, and pod routes both ways to every peer node."""
    if link_exists(addr.veth):
        run(["ip", "link", "del", addr.veth])
    run(["ip", "link", "add", addr.veth, "type", "veth", "peer", "name", "eth0", "netns", str(init_pid)])
    run(["ip", "link", "set", addr.veth, "master", BRIDGE])
    run(["ip", "link", "set", addr.veth, "up"])
    in_netns(init_pid, "ip", "link", "set", "lo", "up")
    in_netns(init_pid, "ip", "addr", "add", f"{addr.ip}/{HOST_NET.prefixlen}", "dev", "eth0")
    in_netns(init_pid, "ip", "link", "set", "eth0", "up")
    # No default route: anything off the cluster fails at once (ENETUNREACH) instead of timing out,
    # which saves the kubelet ~11 s of start-up (a DNS lookup, the AWS credential provider's metadata probe).
    # The service range is routed to the host so that hostNetwork pods reach 10.96.0.1 (DNATed in the node).
    in_netns(init_pid, "ip", "route", "add", SERVICE_NET, "via", HOST_IP)
    run(["ip", "route", "replace", addr.pod_cidr, "via", addr.ip, "dev", BRIDGE])
    for peer, peer_pid in peers.items():
        in_netns(init_pid, "ip", "route", "replace", peer.pod_cidr, "via", peer.ip)
        in_netns(peer_pid, "ip", "route", "replace", addr.pod_cidr, "via", addr.ip, check=False)


def unwire_node(addr: NodeAddr, peers: dict[NodeAddr, int]) -> None:
    """Remove the node's veth, its host route and the peers' routes to its pods. Idempotent."""
    if link_exists(addr.veth):
        run(["ip", "link", "del", addr.veth], check=False)
    run(["ip", "route", "del", addr.pod_cidr], check=False)
    for peer_pid in peers.values():
        in_netns(peer_pid, "ip", "route", "del", addr.pod_cidr, check=False)


def set_link(addr: NodeAddr, up: bool) -> None:
    """The node's link up or down (a partition cuts it from the API server and every other node)."""
    if not link_exists(addr.veth):
        raise ClusterError(f"{addr.name} has no link {addr.veth}: is it running? see `elastic-chaos cluster status`")
    run(["ip", "link", "set", addr.veth, "up" if up else "down"])


def link_up(addr: NodeAddr) -> bool | None:
    """True/False for the node's host link state; None when there is no link."""
    try:
        flags = int(Path(f"/sys/class/net/{addr.veth}/flags").read_text(), 16)
    except OSError:
        return None
    return bool(flags & 0x1)


NODE_NAT_RULES = [
    [chain, "-d", f"{KUBERNETES_SERVICE_IP}/32", "-p", "tcp", "--dport", "443",
     "-j", "DNAT", "--to-destination", f"{HOST_IP}:{API_PORT}"]
    for chain in ("PREROUTING", "OUTPUT")
]
