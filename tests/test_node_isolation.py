"""Root-only building blocks of the local platform: network namespaces and cgroups.

These need root (CI runs as root); elsewhere they skip with the reason.
"""
from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest

from elastic_chaos.host import netns
from elastic_chaos.host.cgroup import NodeCgroups, find_root

pytestmark = pytest.mark.needs_root


@pytest.fixture
def network():
    if netns.unavailable_reason():
        pytest.skip(netns.unavailable_reason())
    net = netns.NodeNetwork(f"chaos-{uuid.uuid4().hex[:8]}")
    net.setup()
    yield net
    net.teardown()


def in_ns(net: netns.NodeNetwork, node: str, code: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(net.wrap(node, [sys.executable, "-c", code]), capture_output=True, text=True,
                          timeout=timeout)


SERVE = ("import socket\ns=socket.create_server(('{addr}', 7777))\nwhile True:\n c,_=s.accept(); c.sendall(b'hi')")
CONNECT = ("import socket,sys\ntry:\n c=socket.create_connection(('{addr}', 7777), timeout=3); print(c.recv(2))\n"
           "except Exception as e: print(type(e).__name__)")


def test_nodes_reach_each_other_over_the_bridge_until_partitioned(network):
    a, b = network.add_node("node-0"), network.add_node("node-1")
    server = subprocess.Popen(network.wrap("node-0", [sys.executable, "-c", SERVE.format(addr=a.address)]))
    try:
        deadline = time.monotonic() + 30
        while in_ns(network, "node-1", CONNECT.format(addr=a.address)).stdout.strip() != "b'hi'":
            assert time.monotonic() < deadline, "the server in node-0 never answered"
            time.sleep(0.5)
        network.partition("node-0")
        # a black hole: the connection attempt times out, it is not refused
        assert in_ns(network, "node-1", CONNECT.format(addr=a.address)).stdout.strip() == "TimeoutError"
        network.heal("node-0")
        assert in_ns(network, "node-1", CONNECT.format(addr=a.address)).stdout.strip() == "b'hi'"
    finally:
        server.kill()
        server.wait()
    assert b.address != a.address


def test_a_listener_created_inside_a_namespace_is_only_reachable_there(network):
    network.add_node("node-0")
    sock = network.listen_in("node-0", 0)
    port = sock.getsockname()[1]
    try:
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2).close(); print('ok')"
        assert in_ns(network, "node-0", code).stdout.strip() == "ok"
        outside = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
        assert "ok" not in outside.stdout              # the host's loopback does not have it
    finally:
        sock.close()


def test_teardown_removes_namespaces_and_bridge(network):
    net = network.add_node("node-0")
    network.teardown()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert net.netns not in listed
    links = subprocess.run(["ip", "link", "show"], capture_output=True, text=True).stdout
    assert network.bridge not in links


@pytest.fixture
def cgroups():
    root = find_root()
    if root is None:
        pytest.skip("no writable cgroup v2 hierarchy with cgroup.freeze/cgroup.kill")
    groups = NodeCgroups(root, f"test-{uuid.uuid4().hex[:8]}")
    yield groups
    for node in ("node-0",):
        if groups.pids(node):
            groups.kill(node)
    groups.remove()


def test_a_cgroup_freezes_and_kills_a_whole_process_tree(cgroups):
    tree = "import subprocess,sys,time; subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)'], " \
           "start_new_session=True); time.sleep(60)"
    proc = subprocess.Popen(cgroups.wrap("node-0", [sys.executable, "-c", tree]))
    deadline = time.monotonic() + 20
    while len(cgroups.pids("node-0")) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = cgroups.pids("node-0")
    assert len(pids) == 2                            # the escaped grandchild is in it too

    cgroups.freeze("node-0")
    assert cgroups.is_frozen("node-0")
    cgroups.thaw("node-0")
    assert not cgroups.is_frozen("node-0")

    assert cgroups.kill("node-0") == pids
    proc.wait(10)
    assert cgroups.pids("node-0") == set()
