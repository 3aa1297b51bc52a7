"""Link faults between machines that route pods (the local cluster's shape, issue 39), on real
namespaces (root, iptables, tc): two "machines", each a namespace on a host bridge with a "pod"
namespace behind it on a range it routes, entered by the path of their namespace file as the
cluster's are. The pods' traffic is forwarded by the machines, never delivered to them: the
degradation must bite there too, be measured by the probe, and leave nothing behind. Then the
Kubernetes platform's MachineLinks over such machines, and where it says no."""
from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from link_helpers import require_links

from elastic_chaos.errors import FaultUnavailable, InjectionFailed
from elastic_chaos.host import links, netns
from elastic_chaos.platforms.kubernetes.kind_cluster import KindMachines
from elastic_chaos.platforms.kubernetes.links import MachineLinks
from elastic_chaos.platforms.kubernetes.machines import MachineOp, Machines, NoMachines
from elastic_chaos.platforms.nodes import NodeInfo, NodeState


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)


@dataclass
class Rack:
    """Two machines (namespace path, address, host veth, pod range) and a pod behind each."""

    machines: list[links.End] = field(default_factory=list)
    pods: list[links.End] = field(default_factory=list)


@pytest.fixture
def rack() -> Iterator[Rack]:
    """Two machines on a host-only bridge, each routing a /24 with one pod in it; removed after."""
    require_links()
    tag = uuid.uuid4().hex[:6]
    net = netns.NodeNetwork(f"test-{tag}")
    pod_ns: list[str] = []
    out = Rack()
    try:
        net.setup()
        nodes = [net.add_node(f"m-{i}") for i in range(2)]
        for i, n in enumerate(nodes):
            pod = f"ectest-{tag}-pod{i}"
            _sh("ip", "netns", "add", pod)
            pod_ns.append(pod)
            outer, inner = f"ecp{tag}{i}a", f"ecp{tag}{i}b"
            _sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            _sh("ip", "link", "set", outer, "netns", n.netns)
            _sh("ip", "link", "set", inner, "netns", pod)
            _sh("ip", "netns", "exec", n.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
            _sh("ip", "netns", "exec", n.netns, "ip", "addr", "add", f"10.77.{i}.1/24", "dev", outer)
            _sh("ip", "netns", "exec", n.netns, "ip", "link", "set", outer, "up")
            _sh("ip", "netns", "exec", pod, "ip", "addr", "add", f"10.77.{i}.2/24", "dev", inner)
            _sh("ip", "netns", "exec", pod, "ip", "link", "set", inner, "up")
            _sh("ip", "netns", "exec", pod, "ip", "link", "set", "lo", "up")
            _sh("ip", "netns", "exec", pod, "ip", "route", "add", "default", "via", f"10.77.{i}.1")
            out.machines.append(links.End(f"m-{i}", f"/var/run/netns/{n.netns}", n.address, n.host_veth,
                                          routes=(f"10.77.{i}.0/24",)))
            out.pods.append(links.End(f"pod-{i}", pod, f"10.77.{i}.2", ""))
        for i, n in enumerate(nodes):     # each machine routes the other's pods via the other's address
            other = nodes[1 - i].address
            _sh("ip", "netns", "exec", n.netns, "ip", "route", "add", f"10.77.{1 - i}.0/24", "via", other)
        yield out
    finally:
        for pod in pod_ns:
            subprocess.run(["ip", "netns", "del", pod], capture_output=True, timeout=30, check=False)
        net.teardown()


def _left(*ends: links.End) -> list[str]:
    return [f for e in ends for f in links.leftovers(e.netns, e.host_veth)]


def test_a_delay_between_machines_holds_their_pods_traffic_and_goes_without_a_trace(rack: Rack) -> None:
    a, b = rack.machines
    p0, p1 = rack.pods
    before = links.probe(p0, p1, count=50, interval_s=0.002)
    d = links.Degradation("tc1", a, (b,), queue=21)
    try:
        links.set_delay(d, 0.015)
        hooks = links._ipt(a.netns, "-S", "FORWARD")
        assert "-j EC-tc1" in hooks, hooks       # the pods' packets are forwarded: the chain is jumped to there
        between_pods = links.probe(p0, p1, count=100, interval_s=0.005, wait_s=1.0)
        between_machines = links.probe(a, b, count=100, interval_s=0.005, wait_s=1.0)
    finally:
        assert links.remove(d) == []
    assert before.echoed == 50 and before.rtt_ms is not None and before.rtt_ms < 10
    for measured in (between_pods, between_machines):   # 15 ms each way: ~30 ms more per round trip
        assert measured.echoed == 100 and measured.rtt_ms is not None and 28 <= measured.rtt_ms <= 50, measured
    assert _left(a, b) == []
    assert "EC-" not in links._ipt(a.netns, "-S") + links._ipt(b.netns, "-S")
    after = links.probe(p0, p1, count=50, interval_s=0.002)
    assert after.echoed == 50 and after.rtt_ms is not None and after.rtt_ms < 10


def test_a_link_down_between_machines_passes_none_of_their_pods_packets(rack: Rack) -> None:
    a, b = rack.machines
    p0, p1 = rack.pods
    d = links.Degradation("tc2", a, (b,))
    try:
        links.set_loss(d, 1.0)
        down = links.probe(p0, p1, count=20, interval_s=0.01, wait_s=0.3)
    finally:
        assert links.remove(d) == []
    assert down.echoed == 0
    assert links.probe(p0, p1, count=20, interval_s=0.005).echoed == 20
    assert _left(a, b) == []


def test_a_rate_cap_between_machines_holds_their_pods_stream(rack: Rack) -> None:
    a, b = rack.machines
    p0, p1 = rack.pods
    d = links.Degradation("tc3", a, (b,))
    try:
        links.set_rate(d, 8000)
        capped = links.probe(p0, p1, count=10, stream_s=1.5)
    finally:
        assert links.remove(d) == []
    assert capped.kbit_s is not None and 0.6 * 8000 <= capped.kbit_s <= 1.15 * 8000, capped
    assert _left(a, b) == []


# -- the Kubernetes platform's links over such machines -------------------------------------------
class RackMachines(Machines):
    """The rack's two machines, operated here: only their link ends."""

    name = "the rack's"

    def __init__(self, rack: Rack) -> None:
        self.ends = {e.node: e for e in rack.machines}

    def unavailable(self, op: MachineOp) -> str | None:
        return None if op is MachineOp.LINK else "not in this test"

    def _link_end(self, machine: str) -> links.End:
        return self.ends[machine]


@dataclass
class Cluster:
    """What MachineLinks asks of a Kubernetes platform: pods on machines, the machines' owner, the job."""

    machine_ops: Machines
    placement: dict[str, str]
    job: None = None

    def machine_of(self, pod: str) -> str:
        return self.placement[pod]

    def alive_nodes(self) -> list[NodeInfo]:
        return [NodeInfo(name=p, state=NodeState.RUNNING, started_at=0.0) for p in self.placement]


def test_the_link_between_two_pods_machines_is_degraded_measured_and_restored(rack: Rack) -> None:
    cluster = Cluster(RackMachines(rack), {"job-worker-0": "m-0", "job-worker-1": "m-1"})
    ml = MachineLinks(cluster)  # type: ignore[arg-type]
    assert ml.unavailable() is None
    hit = ml.degrade("job-worker-0", (), loss=0.0, rate_kbit=None, down_s=None, up_s=None, delay_ms=10.0,
                     jitter_ms=0.0, to_store=False)
    try:
        assert hit.detail["machine"] == "m-0" and hit.detail["peer_machines"] == ["m-1"]
        assert hit.detail["peers"] == ["job-worker-1"] and hit.detail["probed"] == "m-1"
        grew = hit.detail["probe"]["rtt_ms"] - hit.detail["baseline"]["rtt_ms"]
        assert 18 <= grew <= 35, hit.detail
        assert _left(*rack.machines), "the rules are there while the link is degraded"
    finally:
        done = ml.restore("job-worker-0", hit.detail["link"])
    assert done.action == "restored" and _left(*rack.machines) == []
    assert ml.restore("job-worker-0", hit.detail["link"]).action == "nothing-to-restore"


def test_each_way_between_two_pods_machines_is_delayed_its_own_and_measured_apart(rack: Rack) -> None:
    cluster = Cluster(RackMachines(rack), {"job-worker-0": "m-0", "job-worker-1": "m-1"})
    ml = MachineLinks(cluster)  # type: ignore[arg-type]
    hit = ml.degrade("job-worker-0", (), loss=0.0, rate_kbit=None, down_s=None, up_s=None, delay_ms=15.0,
                     jitter_ms=0.0, to_store=False, reverse_delay_ms=0.0)
    try:
        probe, base = hit.detail["probe"], hit.detail["baseline"]
        assert 13 <= probe["forward_ms"] - base["forward_ms"] <= 22, hit.detail     # m-0 -> m-1 held in m-1
        assert probe["reverse_ms"] - base["reverse_ms"] <= 3, hit.detail           # m-1 -> m-0: nothing
        assert links.probe(*rack.pods, count=50, interval_s=0.005).forward_ms >= 13   # the pods' traffic too
    finally:
        done = ml.restore("job-worker-0", hit.detail["link"])
    assert done.action == "restored" and _left(*rack.machines) == []


def test_a_bursty_loss_between_machines_counts_its_drops_and_leaves_nothing(rack: Rack) -> None:
    ml = MachineLinks(Cluster(RackMachines(rack), {"w-0": "m-0", "w-1": "m-1"}))  # type: ignore[arg-type]
    hit = ml.degrade("w-0", ("w-1",), loss=0.2, rate_kbit=None, down_s=None, up_s=None, delay_ms=None,
                     jitter_ms=0.0, to_store=False, burst=4.0)
    try:
        assert hit.action == "bursty-loss" and {t["direction"] for t in hit.detail["drops"]} == {"forward", "reverse"}
        assert 0.1 <= hit.detail["probe"]["loss_each_way"] <= 0.3, hit.detail
    finally:
        done = ml.restore("w-0", hit.detail["link"])
    whole = done.detail["drops"]       # the readers' tallies over the whole fault, taken before they went
    assert sum(t["packets"] for t in whole) >= sum(t["packets"] for t in hit.detail["drops"]) > 400
    assert _left(*rack.machines) == []
    assert links.probe(*rack.pods, count=50, interval_s=0.005).echoed == 50


def test_the_platforms_stop_restores_a_link_still_degraded(rack: Rack) -> None:
    ml = MachineLinks(Cluster(RackMachines(rack), {"w-0": "m-0", "w-1": "m-1"}))  # type: ignore[arg-type]
    ml.degrade("w-1", ("w-0",), loss=0.0, rate_kbit=None, down_s=0.5, up_s=0.5, delay_ms=None, jitter_ms=0.0,
               to_store=False)
    assert _left(*rack.machines)
    assert ml.release_all() == [] and _left(*rack.machines) == []
    assert links.probe(*rack.pods, count=20, interval_s=0.005).echoed == 20


def test_pods_on_one_machine_have_no_link_between_them_and_the_store_link_is_refused() -> None:
    ml = MachineLinks(Cluster(NoMachines(), {"w-0": "m-0", "w-1": "m-0"}))  # type: ignore[arg-type]
    kw = {"loss": 0.1, "rate_kbit": None, "down_s": None, "up_s": None, "delay_ms": None, "jitter_ms": 0.0}
    with pytest.raises(InjectionFailed, match="w-1 run.s. on m-0 with w-0: .* no link between them"):
        ml.degrade("w-0", (), to_store=False, **kw)   # type: ignore[arg-type]
    with pytest.raises(InjectionFailed, match="--to-store is made on the local platform only"):
        ml.degrade("w-0", (), to_store=True, **kw)    # type: ignore[arg-type]


def test_clusters_whose_machines_are_not_ours_say_why_links_cannot_be_degraded(tmp_path: Path) -> None:
    nobody = MachineLinks(Cluster(NoMachines(), {})).unavailable()  # type: ignore[arg-type]
    assert nobody is not None and "owner" in nobody and "make cluster-up" in nobody
    kind = KindMachines("docker", actions=None).unavailable(MachineOp.LINK)  # type: ignore[arg-type]
    assert kind is not None and "make cluster-up" in kind
    with pytest.raises(FaultUnavailable, match="degrading the link between machines"):
        NoMachines().link_end("ec-node-2")


def test_on_eks_without_the_cluster_service_account_and_role_the_reason_names_the_fis_actions_and_each() -> None:
    from types import SimpleNamespace

    from elastic_chaos.platforms.aws.eks import EksOptions
    from elastic_chaos.platforms.aws.links import FisLinks
    host = SimpleNamespace(eks_options=EksOptions(), aws_side=SimpleNamespace(fis_role_arn=None))
    reason = FisLinks(platform=host).unavailable()  # type: ignore[arg-type]
    assert reason is not None
    for words in ("aws:eks:pod-network-latency", "aws:eks:pod-network-packet-loss", "EksOptions.cluster",
                  "EksOptions.fis_service_account", "--fis-role-arn", "docs/EKS.md"):
        assert words in reason


def test_a_local_cluster_machines_link_end_is_its_inits_namespace_address_pods_and_veth(tmp_path: Path) -> None:
    from elastic_chaos.localcluster.base import Layout, save_state
    from elastic_chaos.localcluster.node import record
    from elastic_chaos.platforms.kubernetes.machines import LocalClusterMachines
    if os.geteuid() != 0:
        pytest.skip("the local cluster's machines are root's")
    layout = Layout(tmp_path)
    layout.state_file.parent.mkdir(parents=True, exist_ok=True)
    save_state(layout, {"id": "0123abcd", "procs": {}, "next_index": 4, "nodes": {
        "ec-node-3": {"index": 3, "init": record(os.getpid())},                  # running: this process
        "ec-node-2": {"index": 2, "init": {"pid": os.getpid(), "start": -1}}}})  # its init gone (PID reused)
    end = LocalClusterMachines(tmp_path).link_end("ec-node-3")
    assert end == links.End("ec-node-3", f"/proc/{os.getpid()}/ns/net", "10.87.0.13", "ec0123abcdv3",
                            routes=("10.88.3.0/24",))
    assert links.netns_exists(end.netns)
    with pytest.raises(InjectionFailed, match="ec-node-2 is not running"):
        LocalClusterMachines(tmp_path).link_end("ec-node-2")
