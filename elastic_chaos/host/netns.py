"""A private network for the local nodes: a host-only bridge and a namespace per node.

With every node on the host's loopback, a "lost" peer is always noticed at
once: the kernel answers for it (RST, connection refused). A real instance
loss or NIC failure is silence, and peers only find out by timeouts. So,
when run as root, each node gets its own network namespace with one veth
interface (``eth0``, 10.99.x.y/16) on a bridge that has no address on the
host and no route anywhere: nodes reach each other and nothing else.

A partition disables the node's bridge port: frames to and from it are
dropped, both interfaces stay up, nobody answers — a black hole. Healing
re-enables the port and the TCP connections that survived resume.

Servers the toolkit runs for the nodes (the etcd relay, the metadata
stand-in) listen on 127.0.0.1 *inside* each node's namespace: a socket
belongs to the namespace it was created in, so a thread briefly enters the
namespace (setns) to create it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import ipaddress
import os
import re
import shutil
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from elastic_chaos.errors import SetupError

CLONE_NEWNET = 0x40000000
SUBNET = ipaddress.ip_network("10.99.0.0/16")


def unavailable_reason() -> str | None:
    """Why per-node network namespaces cannot be used here, or None if they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (run as root to get real black-hole partitions)"
    for tool in ("ip", "bridge"):
        if shutil.which(tool) is None:
            return f"`{tool}` (iproute2) is not installed"
    return None


@dataclass(frozen=True)
class NodeNet:
    node: str
    netns: str
    address: str
    host_veth: str


class NodeNetwork:
    """The bridge and namespaces of one run. ``teardown()`` is idempotent."""

    def __init__(self, run_id: str) -> None:
        reason = unavailable_reason()
        if reason:
            raise SetupError(f"isolated node networking is unavailable: {reason}")
        self.short = run_id.rsplit("-", 1)[-1][:6]
        self.bridge = f"ecb{self.short}"
        self.nodes: dict[str, NodeNet] = {}
        self._next = 2
        self._up = False

    def setup(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        self._up = True
        _ip("link", "set", self.bridge, "up")

    def plan(self, node: str) -> NodeNet:
        """The namespace, address and link the next :meth:`add_node` makes (nothing is made)."""
        index = self._next
        return NodeNet(node=node, netns=f"elastic-chaos-{self.short}-{node}",
                       address=str(SUBNET.network_address + index), host_veth=f"ec{self.short}-{index}")

    def add_node(self, node: str) -> NodeNet:
        net = self.plan(node)
        self._next += 1
        peer = f"{net.host_veth}p"
        _ip("netns", "add", net.netns)
        self.nodes[node] = net
        _ip("link", "add", net.host_veth, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", net.netns)
        _ip("link", "set", net.host_veth, "master", self.bridge)
        _ip("link", "set", net.host_veth, "up")
        inside = ["ip", "netns", "exec", net.netns, "ip"]
        _run([*inside, "link", "set", peer, "name", "eth0"])
        _run([*inside, "addr", "add", f"{net.address}/{SUBNET.prefixlen}", "dev", "eth0"])
        _run([*inside, "link", "set", "eth0", "up"])
        _run([*inside, "link", "set", "lo", "up"])
        return net

    def wrap(self, node: str, cmd: list[str]) -> list[str]:
        """``cmd`` run inside the node's namespace."""
        return ["ip", "netns", "exec", self.nodes[node].netns, *cmd]

    def partition(self, node: str) -> None:
        """Black-hole the node: its bridge port drops every frame, links stay up."""
        _run(["bridge", "link", "set", "dev", self.nodes[node].host_veth, "state", "0"])

    def heal(self, node: str) -> None:
        _run(["bridge", "link", "set", "dev", self.nodes[node].host_veth, "state", "3"])

    def listen_in(self, node: str, port: int = 0) -> socket.socket:
        """A TCP socket listening on 127.0.0.1:``port`` inside the node's namespace."""
        return socket_in_netns(self.nodes[node].netns, ("127.0.0.1", port))

    def remove_node(self, node: str) -> None:
        net = self.nodes.pop(node, None)
        if net is not None:
            _run(["ip", "link", "del", net.host_veth], check=False)
            _run(["ip", "netns", "del", net.netns], check=False)

    def teardown(self) -> None:
        for node in list(self.nodes):
            self.remove_node(node)
        if self._up:
            _run(["ip", "link", "del", self.bridge], check=False)
            self._up = False


_OUR_NETNS = re.compile(r"elastic-chaos-[A-Za-z0-9_.]{1,6}-node-\d+")
_OUR_LINK = re.compile(r"ecb[A-Za-z0-9_.]{1,6}|ec[A-Za-z0-9_.]{1,6}-\d+")


def remove_leftovers(namespaces: list[str], links: list[str]) -> tuple[list[str], list[str]]:
    """Delete network namespaces and links a run recorded (what a killed runner left), by
    name, only names this module makes. Returns (removed, errors); idempotent (a gone one
    is neither)."""
    removed: list[str] = []
    errors: list[str] = []
    existing = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                  timeout=30, check=False).stdout.split())
    for name in namespaces:
        if _OUR_NETNS.fullmatch(name) and name in existing:
            _delete(["ip", "netns", "del", name], f"network namespace {name}", removed, errors)
    for link in links:
        if _OUR_LINK.fullmatch(link) and Path(f"/sys/class/net/{link}").exists():
            _delete(["ip", "link", "del", link], f"link {link}", removed, errors)
    return removed, errors


def _delete(cmd: list[str], what: str, removed: list[str], errors: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    if proc.returncode == 0:
        removed.append(what)
    else:
        errors.append(f"could not remove {what}: {proc.stderr.strip()}")


def socket_in_netns(netns: str, address: tuple[str, int]) -> socket.socket:
    """Create, bind and listen a TCP socket inside ``netns`` (from a throwaway thread:
    setns changes only the calling thread's namespace, and the thread then ends)."""
    result: dict[str, object] = {}

    def create() -> None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
            with open(Path("/var/run/netns") / netns, "rb") as ns:
                if libc.setns(ns.fileno(), CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns into {netns}: {os.strerror(err)}")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(64)
            result["socket"] = sock
        except OSError as exc:
            result["error"] = exc

    thread = threading.Thread(target=create, name=f"setns-{netns}")
    thread.start()
    thread.join(10)
    if "socket" not in result:
        raise SetupError(f"could not listen on {address} inside {netns}: {result.get('error')}")
    sock = result["socket"]
    assert isinstance(sock, socket.socket)
    return sock


def _ip(*args: str) -> None:
    _run(["ip", *args])


def _run(cmd: list[str], *, check: bool = True) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    if check and proc.returncode != 0:
        raise SetupError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip() or proc.stdout.strip()}")
