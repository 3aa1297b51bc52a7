"""The local cluster's cleanup removes only what its own state records (issue 25).

``elastic-chaos cluster down`` in a folder with no cluster deleted a bridge ``eck8s0`` and a
veth ``eck8sv7`` made by hand, flushed and deleted the ``ELASTIC-CHAOS-K8S*`` iptables chains,
SIGKILLed what ran in ``elastic-chaos-cluster/ec-node-N`` cgroups, printed "cluster down",
exit 0. Here real look-alikes are made on the host (links, chains, a jump, cgroups with a live
process in them: named as the old code matched them, and as another checkout's cluster names
its own), ``down`` runs for real, and every look-alike must survive; the test removes them by
their exact names afterwards. Needs root and iptables (a bridge, chains, cgroups).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from elastic_chaos.localcluster import net, node, ops
from elastic_chaos.localcluster.base import ClusterError, Layout, save_state, start_time
from elastic_chaos.localcluster.names import ALIAS_PREFIX, HostNames

REPO = Path(__file__).resolve().parent.parent
OTHER_ID = "0badc0de"
"""Another checkout's cluster (its names carry this id)."""

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("iptables") is None or not node.hierarchies(),
                                reason="makes real links, iptables chains and cgroups: needs root, iptables and "
                                       "cgroups (apt-get install iptables)")


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30, check=check)


def chain_exists(table: str, chain: str) -> bool:
    return sh("iptables", "-w", "5", "-t", table, "-S", chain, check=False).returncode == 0


def rule_exists(table: str, chain: str, *rule: str) -> bool:
    return sh("iptables", "-w", "5", "-t", table, "-C", chain, *rule, check=False).returncode == 0


def sleeper() -> subprocess.Popen[bytes]:
    """A process standing in for whatever runs in a cgroup or under a recorded PID."""
    return subprocess.Popen(["sleep", "300"], start_new_session=True)


def alive(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is None


@dataclass
class Lookalikes:
    """What the test made on the host that is NOT the cluster's under test; removed by exact name."""

    links: list[str] = field(default_factory=list)
    chains: list[tuple[str, str]] = field(default_factory=list)
    jumps: list[list[str]] = field(default_factory=list)
    cgroups: list[Path] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def all_there(self) -> list[str]:
        """What of it is gone (empty: everything survived)."""
        gone = [f"link {n}" for n in self.links if not net.link_exists(n)]
        gone += [f"chain {t}/{c}" for t, c in self.chains if not chain_exists(t, c)]
        gone += [f"jump {' '.join(j)}" for j in self.jumps if not rule_exists(*j)]
        gone += [f"cgroup {c}" for c in self.cgroups if not c.is_dir()]
        gone += [f"process {p.pid}" for p in self.procs if not alive(p)]
        return gone


def _make_lookalikes(made: Lookalikes) -> None:
    legacy, other = HostNames.legacy(), HostNames.for_id(OTHER_ID)
    taken = [n for n in (legacy.bridge, legacy.veth(7), other.bridge, other.veth(2)) if net.link_exists(n)]
    taken += [c for t, c in net.chains(legacy) + net.chains(other) if chain_exists(t, c)]
    taken += [str(h / p) for h in node.hierarchies() for p in (legacy.cgroup_parent, other.cgroup_parent)
              if (h / p).exists()]
    if taken:
        pytest.skip(f"{', '.join(taken)} already exist here (someone's cluster?): the test makes its look-alikes "
                    "only where nothing of that name exists, and never touches what it did not make")
    for names in (legacy, other):
        sh("ip", "link", "add", names.bridge, "type", "bridge")
        made.links.append(names.bridge)
        sh("ip", "link", "set", "dev", names.bridge, "alias", names.alias(f"/elsewhere/{names.cluster_id}/.cluster"))
    for veth in (legacy.veth(7), other.veth(2)):
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", veth + "p")
        made.links.append(veth)
    for names in (legacy, other):
        for table, chain in net.chains(names):
            sh("iptables", "-w", "5", "-t", table, "-N", chain)
            made.chains.append((table, chain))
            sh("iptables", "-w", "5", "-t", table, "-A", chain, "-j", "RETURN")
        for jump in net.jumps(names):
            table, chain, *rule = jump
            sh("iptables", "-w", "5", "-t", table, "-A", chain, *rule)
            made.jumps.append(jump)
    pids = next((h for h in node.hierarchies() if h.name == "pids"), node.hierarchies()[0])
    for parent, name in ((legacy.cgroup_parent, "ec-node-3"), (other.cgroup_parent, "ec-node-2")):
        (pids / parent / name).mkdir(parents=True)
        made.cgroups += [pids / parent / name, pids / parent]
        proc = sleeper()
        made.procs.append(proc)
        (pids / parent / name / "cgroup.procs").write_text(str(proc.pid))


def _remove_lookalikes(made: Lookalikes) -> None:
    for proc in made.procs:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(10)
    for cgroup in made.cgroups:   # children before parents: in the order made
        for _ in range(50):
            try:
                cgroup.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)
    for table, chain, *rule in made.jumps:
        sh("iptables", "-w", "5", "-t", table, "-D", chain, *rule, check=False)
    for table, chain in made.chains:
        sh("iptables", "-w", "5", "-t", table, "-F", chain, check=False)
        sh("iptables", "-w", "5", "-t", table, "-X", chain, check=False)
    for link in made.links:
        if net.link_exists(link):
            sh("ip", "link", "del", link, check=False)


@pytest.fixture
def lookalikes() -> Iterator[Lookalikes]:
    """Links, chains, jumps and cgroups (with a process in each) that a cluster's cleanup must
    leave alone: the old code's names (bridge eck8s0, veth eck8sv7, chains ELASTIC-CHAOS-K8S*,
    cgroup elastic-chaos-cluster/ec-node-3) and another checkout's cluster's (id 0badc0de)."""
    made = Lookalikes()
    try:
        _make_lookalikes(made)
        assert made.all_there() == []
        yield made
    finally:
        _remove_lookalikes(made)


def cluster_cli(*args: str, root: Path, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ELASTIC_CHAOS_CLUSTER_DIR": str(root), "PYTHONPATH": str(REPO)}
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "elastic_chaos.localcluster", *args],
                          capture_output=True, text=True, timeout=120, env=env, cwd=root.parent)


def test_down_where_there_is_no_cluster_says_so_and_touches_nothing(tmp_path: Path, lookalikes: Lookalikes):
    root = tmp_path / ".cluster"
    out = cluster_cli("down", root=root)
    assert lookalikes.all_there() == [], out.stdout + out.stderr
    assert out.returncode == 3, out.stderr            # status's "no cluster" code
    assert "no cluster here" in out.stderr and "Traceback" not in out.stderr
    assert "cluster down" not in out.stdout
    assert not root.exists()                          # not even its folder or lock was made


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[tuple[Layout, HostNames, dict[str, subprocess.Popen[bytes]]]]:
    """A recorded cluster of this folder: its state (an id, the host network, node ec-node-2, an
    etcd process), and its real bridge (no address: a running cluster elsewhere on the machine keeps
    its routes), chains, jumps, a node veth and node cgroups with a process in them."""
    layout = Layout(tmp_path / ".cluster")
    names = HostNames.for_id("5eed1e55")
    for n in (names.bridge, names.veth(2)):
        if net.link_exists(n):
            pytest.skip(f"{n} exists here already")
    etcd, in_node, reused = sleeper(), sleeper(), sleeper()
    state = {"id": names.cluster_id, "host_net": net.host_record(names), "next_index": 3,
             "nodes": {"ec-node-2": {"index": 2}},
             "procs": {"etcd": {"pid": etcd.pid, "start": start_time(etcd.pid), "args": ["etcd"]},
                       # a recorded PID now used by another process (another start time): not ours any more
                       "kube-scheduler": {"pid": reused.pid, "start": (start_time(reused.pid) or 0) - 1}}}
    save_state(layout, state)
    sh("ip", "link", "add", names.bridge, "type", "bridge")
    sh("ip", "link", "add", names.veth(2), "type", "veth", "peer", "name", names.veth(2) + "p")
    net.make_chains(names)
    node.make_cgroups(names.cgroup_parent, "ec-node-2")
    for cg in node.node_cgroups(names.cgroup_parent, "ec-node-2"):
        if (cg / "cgroup.procs").exists():
            (cg / "cgroup.procs").write_text(str(in_node.pid))
            break
    procs = {"etcd": etcd, "in-node": in_node, "reused": reused}
    try:
        yield layout, names, procs
    finally:
        for proc in procs.values():
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(10)
        for jump in net.jumps(names):
            table, chain, *rule = jump
            sh("iptables", "-w", "5", "-t", table, "-D", chain, *rule, check=False)
        for table, chain in net.chains(names):
            sh("iptables", "-w", "5", "-t", table, "-F", chain, check=False)
            sh("iptables", "-w", "5", "-t", table, "-X", chain, check=False)
        node.remove_cgroups(names.cgroup_parent, ["ec-node-2"], with_parent=True)
        for link in (names.veth(2), names.bridge):
            if net.link_exists(link):
                sh("ip", "link", "del", link, check=False)


def test_down_removes_its_own_cluster_and_nothing_that_only_looks_like_it(own_cluster, lookalikes: Lookalikes):
    layout, names, procs = own_cluster
    out = cluster_cli("down", root=layout.root)
    # nothing that only looks like it is touched: not the old names, not another cluster's, not a reused PID
    assert lookalikes.all_there() == [], out.stdout + out.stderr
    assert alive(procs["reused"])
    assert out.returncode == 0, out.stderr
    assert "cluster down" in out.stdout
    # everything of its own is gone
    assert not net.link_exists(names.bridge) and not net.link_exists(names.veth(2))
    assert not any(chain_exists(t, c) for t, c in net.chains(names))
    assert not any(rule_exists(*j) for j in net.jumps(names))
    assert not any(h.joinpath(names.cgroup_parent).exists() for h in node.hierarchies())
    for what in ("etcd", "in-node"):
        procs[what].wait(10)
    assert not layout.run.exists()


def test_another_clusters_network_makes_up_refuse_and_says_whose(tmp_path: Path):
    """Every local cluster uses the same ranges, so a second checkout's up must refuse (exit 2)
    before it makes anything, naming the link and, from its alias, the other cluster's folder.
    The stand-in holds an address in the pod range on a link that stays down (no route is made:
    a cluster running on this machine meanwhile keeps working)."""
    other = HostNames.for_id(OTHER_ID)
    stand_in = "ec0badc0dexx"
    if net.link_exists(stand_in):
        pytest.skip(f"{stand_in} exists here already")
    sh("ip", "link", "add", stand_in, "type", "bridge")
    try:
        sh("ip", "link", "set", "dev", stand_in, "alias", other.alias("/elsewhere/checkout/.cluster"))
        sh("ip", "addr", "add", "10.88.250.1/24", "dev", stand_in)
        layout = Layout(tmp_path / ".cluster")
        with pytest.raises(ClusterError) as refused:
            ops._fresh_up(layout, {"procs": {}, "nodes": {}, "next_index": 1}, 1, time.monotonic(), 1)
        assert refused.value.exit_code == 2
        message = str(refused.value)
        assert stand_in in message and "10.88.250.1/24" in message
        assert "ELASTIC_CHAOS_CLUSTER_DIR=/elsewhere/checkout/.cluster elastic-chaos cluster down" in message
        assert not layout.state_file.exists()        # refused before anything was recorded or made
    finally:
        sh("ip", "link", "del", stand_in, check=False)


def test_down_without_iptables_says_what_to_install_and_leaves_the_lock_free(own_cluster):
    """It raised FileNotFoundError (a traceback, exit 1) and left the cluster half down."""
    layout, names, procs = own_cluster
    bin_dir = layout.root.parent / "bin-without-iptables"
    bin_dir.mkdir()
    os.symlink(shutil.which("ip") or "/usr/sbin/ip", bin_dir / "ip")
    out = cluster_cli("down", root=layout.root, path=str(bin_dir))
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert "iptables not found on PATH" in out.stderr
    assert "apt-get install --no-install-recommends iptables" in out.stderr
    # refused before doing anything: the cluster is as it was, and the lock is free
    assert layout.state_file.exists() and alive(procs["etcd"]) and net.link_exists(names.bridge)
    with open(layout.lock_file, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)   # raises BlockingIOError if still held
    # with iptables back on PATH the same down completes
    assert cluster_cli("down", root=layout.root).returncode == 0
    assert not net.link_exists(names.bridge)


def test_a_missing_command_is_a_setup_error_not_a_traceback():
    from elastic_chaos.localcluster.base import SetupError, run
    with pytest.raises(SetupError, match="not installed") as missing:
        run(["elastic-chaos-no-such-command"])
    assert missing.value.exit_code == 2


def test_every_host_name_carries_the_clusters_id_and_fits_the_kernels_limits():
    names = HostNames.for_id("89abcdef")
    assert all("89abcdef" in n for n in (names.bridge, names.veth(200), names.nat_chain, names.in_chain,
                                           names.fwd_chain, names.cgroup_parent, names.comment))
    assert max(len(names.bridge), len(names.veth(200))) <= 15          # IFNAMSIZ - 1
    assert max(len(c) for _, c in net.chains(names)) <= 28             # XT_EXTENSION_MAXNAMELEN - 1
    assert names.alias("/r").startswith(ALIAS_PREFIX)
    with pytest.raises(ValueError):
        HostNames.for_id("eck8s0")


def test_a_state_from_before_ids_names_the_fixed_names_it_made_and_an_empty_one_names_nothing():
    """A cluster started by the code before ids can still be brought down: its state (no ``id``,
    ``host_net: true``) is what says it made eck8s0 and the ELASTIC-CHAOS-K8S chains."""
    old = {"procs": {}, "nodes": {"ec-node-1": {"index": 1}}, "host_net": True}
    assert HostNames.of(old) == HostNames.legacy() and HostNames.of(old).veth(1) == "eck8sv1"
    assert net.recorded_jumps(old) == net.jumps(HostNames.legacy())
    assert net.recorded_jumps({"procs": {}, "nodes": {}}) == []
    assert not ops.has_cluster({"procs": {}, "nodes": {}, "next_index": 1})


def test_a_node_the_cluster_keeps_outlives_the_process_that_started_it_without_a_leak_warning(tmp_path):
    # a replacement node a test adds stays a machine of the cluster (cluster down stops it by its recorded
    # PID); before, Python reported each as "ResourceWarning: subprocess N is still running" at exit (CI log)
    import subprocess
    import sys
    code = ("import subprocess, sys\n"
            "from elastic_chaos.localcluster import base\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'], start_new_session=True)\n"
            "base.keep(p)\n"
            "print(p.pid, flush=True)\n")
    done = subprocess.run([sys.executable, "-X", "dev", "-W", "always::ResourceWarning", "-c", code],
                          capture_output=True, text=True, timeout=60)
    pid = int(done.stdout.split()[0])
    try:
        assert done.returncode == 0 and "still running" not in done.stderr, done.stderr
    finally:
        import os
        import signal
        os.kill(pid, signal.SIGKILL)


def test_a_process_spawned_and_stopped_by_its_record_leaves_no_leak_warning_when_its_popen_is_dropped(tmp_path):
    # the node template's containerd is spawned, stopped through its record and its Popen dropped: a test
    # that added a node (a new template built) failed on "ResourceWarning: subprocess N is still running"
    import subprocess
    import sys
    code = ("import gc, sys\n"
            "from pathlib import Path\n"
            "from elastic_chaos.localcluster import base\n"
            "_, rec = base.spawn([sys.executable, '-c', 'import time; time.sleep(30)'], Path(sys.argv[1]))\n"
            "base.stop(rec, grace_s=5)\n"
            "_ = None; gc.collect()\n"
            "print('stopped', flush=True)\n")
    done = subprocess.run([sys.executable, "-X", "dev", "-W", "always::ResourceWarning", "-c", code,
                           str(tmp_path / "p.log")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "stopped", done.stderr
    assert "still running" not in done.stderr, done.stderr
