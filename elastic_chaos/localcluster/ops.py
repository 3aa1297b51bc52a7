"""The operations on the local cluster: up, down, and the node lifecycle the toolkit's faults use.

Contract of every operation: it blocks until done (or a bounded timeout, then
ClusterError), takes the cluster lock, and records each resource in the state
before making it, so :func:`down` can always undo it — after a crash too. What
it removes is only what the state names: host resources by the names of the
cluster's own id (:mod:`names`), processes by PID and start time. Two clusters
cannot share this machine's addresses and ports, so a second ``up`` (another
checkout's) refuses and says whose cluster holds them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from elastic_chaos.localcluster import net, node
from elastic_chaos.localcluster.api import Api
from elastic_chaos.localcluster.base import (
    API_PORT,
    CAPACITY_LABEL,
    CONTROLLER_MANAGER_PORT,
    ETCD_CLIENT_PORT,
    ETCD_PEER_PORT,
    HOST_IP,
    HOST_NET,
    MAX_NODES,
    METADATA_PORTS,
    POD_NETS,
    PROFILE_NAME,
    PROFILE_NAMESPACE,
    SCHEDULER_PORT,
    SPOT_TAINT,
    ClusterError,
    Layout,
    NodeAddr,
    is_alive,
    load_state,
    locked,
    node_index,
    run,
    save_state,
    stop,
    wait_for,
    wait_gone,
)
from elastic_chaos.localcluster.control import COMPONENTS, start_component
from elastic_chaos.localcluster.deps import check_ready_to_run, require_commands
from elastic_chaos.localcluster.names import HostNames, new_id
from elastic_chaos.localcluster.pki import (
    BRIDGE_SERVER,
    LOCAL_SERVER,
    make_control_plane_pki,
    make_node_cert,
    write_kubeconfig,
)
from elastic_chaos.localcluster.template import IMAGE_TARS, clone, ensure_template

READY_TIMEOUT_S = 300.0


log = logging.getLogger(__name__)


def progress(t0: float, msg: str) -> None:
    """One progress line (the command line prints them on stderr; the toolkit logs them)."""
    log.info("[%6.1fs] %s", time.monotonic() - t0, msg)


# ---- up --------------------------------------------------------------------------------------------

def up(layout: Layout, nodes: int = 4, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Start a cluster of ``nodes`` Ready nodes, or complete a running one. Blocks until Ready.

    Idempotent: a healthy cluster is kept (nodes added up to ``nodes``, the current
    trainer image imported where missing); a cluster with any dead component is
    torn down and started again.
    """
    where = layout.root.resolve()
    hidden = [d for d in node.PRIVATE_DIRS.values() if Path(d) in (where, *where.parents)]
    if hidden:   # every node mounts its own there: the node would not see the cluster folder
        raise ClusterError(f"the cluster folder {layout.root} is under {hidden[0]}, which every node replaces with "
                           "its own private one: use a repository (or ELASTIC_CHAOS_CLUSTER_DIR) outside "
                           f"{', '.join(sorted(node.PRIVATE_DIRS.values()))}", exit_code=2)
    check_ready_to_run(layout)
    if not 1 <= nodes <= MAX_NODES:
        raise ClusterError(f"--nodes must be 1..{MAX_NODES}", exit_code=2)
    t0 = time.monotonic()
    with locked(layout):
        state = load_state(layout)
        if has_cluster(state):
            broken = health(layout, state)
            if not broken:
                _complete(layout, state, nodes, t0, timeout_s)
                return
            progress(t0, f"not healthy ({', '.join(broken)}): tearing it down and starting again")
            _down(layout, state)
            state = load_state(layout)
        _fresh_up(layout, state, nodes, t0, timeout_s)


def has_cluster(state: dict[str, Any]) -> bool:
    """True when the state records anything made (a process, a node, the host network, an id)."""
    return bool(state["procs"] or state["nodes"] or state.get("host_net") or state.get("id"))


def _fresh_up(layout: Layout, state: dict[str, Any], nodes: int, t0: float, timeout_s: float) -> None:
    check_host_free()
    _check_ports()
    names = HostNames.for_id(new_id())
    state.update(id=names.cluster_id, host_net=net.host_record(names))
    save_state(layout, state)   # the id and what carries it, before anything is made
    for d in (layout.run, layout.logs):
        d.mkdir(parents=True, exist_ok=True)
    share_checkpoint_folder(layout, state)
    make_control_plane_pki(layout)
    net.setup_host(names, layout.root)
    start_component(layout, state, "etcd")
    save_state(layout, state)
    wait_for("etcd /health", _etcd_healthy, 30)
    start_component(layout, state, "kube-apiserver")
    save_state(layout, state)
    api = Api(layout)
    wait_for("kube-apiserver /readyz", api.ready, 90)
    write_kubeconfig(layout, layout.kubeconfig, "admin", LOCAL_SERVER)
    progress(t0, f"etcd and kube-apiserver ready; admin kubeconfig {layout.kubeconfig}")
    for name in ("kube-controller-manager", "kube-scheduler"):
        start_component(layout, state, name)
        save_state(layout, state)
    _complete(layout, state, nodes, t0, timeout_s)


def _complete(layout: Layout, state: dict[str, Any], nodes: int, t0: float, timeout_s: float) -> None:
    _import_missing_images(layout, state, t0)
    template = None
    if len(state["nodes"]) < nodes:
        template = ensure_template(layout, state)
        progress(t0, f"node template with the images: {template}")
    names = [start_node(layout, state, template) for _ in range(nodes - len(state["nodes"]))]
    if names:
        progress(t0, f"started {', '.join(names)}")
    api = Api(layout)
    wanted = set(state["nodes"])
    wait_for(f"{len(wanted)} Ready nodes", lambda: wanted <= {n for n, r in api.node_ready().items() if r},
             timeout_s, 0.5)
    wait_for("the default ServiceAccount", api.has_default_sa, 60)
    layout.shared.mkdir(parents=True, exist_ok=True)
    api.put_configmap(PROFILE_NAMESPACE, PROFILE_NAME, profile(layout))
    progress(t0, f"{len(wanted)} nodes Ready: {', '.join(sorted(wanted, key=node_index))}")
    print(f"cluster up: export KUBECONFIG={layout.kubeconfig}")


def share_checkpoint_folder(layout: Layout, state: dict[str, Any]) -> None:
    """Make the shared checkpoint folder a mount of its own with shared propagation, before any node
    starts: each node's mount namespace is a slave copy (``unshare --propagation slave``), so a mount
    made on this machine later under the folder (the toolkit's storage layer, a FUSE mount over one
    run's checkpoints) reaches every node, and the pods started after it. Recorded before it is made."""
    layout.shared.mkdir(parents=True, exist_ok=True)
    state["shared_mount"] = str(layout.shared)
    save_state(layout, state)
    run(["mount", "--bind", str(layout.shared), str(layout.shared)])
    run(["mount", "--make-shared", str(layout.shared)])


def unshare_checkpoint_folder(state: dict[str, Any]) -> None:
    """Undo :func:`share_checkpoint_folder`: unmount the recorded folder and anything mounted under it
    (a storage layer a dead run left), lazily. Idempotent; a folder that is no mountpoint is left."""
    path = state.get("shared_mount")
    if isinstance(path, str) and is_mountpoint(path):
        run(["umount", "--recursive", "--lazy", path], check=False)


def is_mountpoint(path: str) -> bool:
    """Whether ``path`` is a mountpoint in this mount namespace (/proc/self/mountinfo; touches no path)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            if len(fields) > 4 and fields[4].replace("\\040", " ") == path:
                return True
    return False


def profile(layout: Layout) -> dict[str, str]:
    """What the toolkit needs to know about this cluster (the ``kube-public/elastic-chaos-cluster``
    ConfigMap, read by elastic_chaos.platforms.kubernetes.profile): who operates its machines, the image
    every node has, the shared checkpoint folder, where pods reach this machine, no DNS."""
    return {
        "machines": "local-cluster",
        "root": str(layout.root),
        "trainer-image": (layout.images / "trainer.ref").read_text().strip(),
        "shared-dir": str(layout.shared),
        "metadata-address": HOST_IP,
        "metadata-ports": "{}-{}".format(*METADATA_PORTS),
        "dns": "false",
        "pods-reachable": "true",
        "capacity-label": CAPACITY_LABEL,
        "spot-taint": SPOT_TAINT,
    }


def check_host_free() -> None:
    """Refuse (exit 2) when this machine's cluster addresses are held by anything but a cluster of
    this folder: another checkout's cluster (its bridge's alias says where it lives), or something
    else. Every local cluster uses the same ranges and ports, so two cannot run at once."""
    held = net.foreign_holders()
    if held:
        raise ClusterError(f"another cluster (or program) holds the addresses a local cluster needs: "
                           f"{'; '.join(held)}. Only one local cluster runs on a machine at a time (each uses "
                           f"{HOST_NET}, {POD_NETS} and 127.0.0.1:{API_PORT}): bring that one down, or use it "
                           "(its KUBECONFIG is in its folder)", exit_code=2)


def _check_ports() -> None:
    for port in (API_PORT, ETCD_CLIENT_PORT, ETCD_PEER_PORT, CONTROLLER_MANAGER_PORT, SCHEDULER_PORT):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                raise ClusterError(f"127.0.0.1:{port} is already in use: another cluster or program holds it "
                                   "(`elastic-chaos cluster down` stops ours)", exit_code=2)


def _etcd_healthy() -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{ETCD_CLIENT_PORT}/health", timeout=2) as resp:
        return b'"health":"true"' in resp.read()


def health(layout: Layout, state: dict[str, Any]) -> list[str]:
    """What is dead or missing in a recorded cluster (empty: healthy)."""
    names = HostNames.of(state)
    broken = [c for c in COMPONENTS if not is_alive(state["procs"].get(c))]
    if not net.link_exists(names.bridge):
        broken.append(f"bridge {names.bridge}")
    for name, rec in state["nodes"].items():
        if not is_alive(rec.get("init")):
            broken.append(name)
            continue
        comms = {node.comm(pid) for pid in node.cgroup_pids(names.cgroup_parent, name)}
        broken += [f"{name}/{c}" for c in ("containerd", "kubelet") if c not in comms]
    return broken


def _import_missing_images(layout: Layout, state: dict[str, Any], t0: float) -> None:
    ref = (layout.images / "trainer.ref").read_text().strip()
    for name in state["nodes"]:
        sock = str(layout.node_dir(name) / "containerd" / "containerd.sock")
        have = run(["ctr", "--address", sock, "-n", "k8s.io", "images", "ls", "-q"]).split()
        if ref not in have:
            run(["ctr", "--address", sock, "-n", "k8s.io", "images", "import", str(layout.images / "trainer.tar")],
                timeout_s=600)
            progress(t0, f"imported {ref} into {name}")


# ---- nodes -----------------------------------------------------------------------------------------

def _peers(state: dict[str, Any], but: str) -> dict[NodeAddr, int]:
    return {NodeAddr(rec["index"]): int(rec["init"]["pid"]) for name, rec in state["nodes"].items()
            if name != but and is_alive(rec.get("init"))}


def start_node(layout: Layout, state: dict[str, Any], template: Path | None) -> str:
    """Start one new node (next free index) and return its name; does not wait for Ready.
    Its containerd root is a clone of ``template``; without one, the node imports the images itself."""
    addr, names = NodeAddr(int(state["next_index"])), HostNames.of(state)
    if addr.index > MAX_NODES:
        raise ClusterError(f"node indexes are used up ({MAX_NODES}): `elastic-chaos cluster down` and up again")
    state["next_index"] = addr.index + 1
    state["nodes"][addr.name] = {"index": addr.index}
    save_state(layout, state)   # before its cgroups and its veth (named after our id and its index) are made
    make_node_cert(layout, addr.name)
    write_kubeconfig(layout, layout.node_dir(addr.name) / "kubelet.kubeconfig", f"kubelet-{addr.name}", BRIDGE_SERVER)
    node.make_cgroups(names.cgroup_parent, addr.name)
    if template is not None:
        clone(template, layout.node_dir(addr.name) / "containerd" / "root")
        images = []
    else:
        images = [str(layout.images / t) for t in IMAGE_TARS]
    node.write_configs(layout, addr, names.cgroup_parent, images)
    wrapper, init_pid = node.spawn_node(layout, addr)
    state["nodes"][addr.name].update(wrapper=node.record(wrapper.pid), init=node.record(init_pid))
    save_state(layout, state)
    net.wire_node(addr, names, init_pid, _peers(state, addr.name))
    assert wrapper.stdin is not None
    wrapper.stdin.write(b"go\n")
    wrapper.stdin.close()
    return addr.name


def add_node(layout: Layout, wait: bool = True, timeout_s: float = READY_TIMEOUT_S) -> str:
    """A new node joins (new name, never reused); with ``wait``, blocks until it is Ready. Returns its name."""
    check_ready_to_run(layout)
    t0 = time.monotonic()
    with locked(layout):
        state = load_state(layout)
        if not is_alive(state["procs"].get("kube-apiserver")):
            raise ClusterError("the cluster is not up: run `make cluster-up` first", exit_code=2)
        name = start_node(layout, state, ensure_template(layout, state))
    progress(t0, f"{name} started")
    if wait:
        api = Api(layout)
        wait_for(f"{name} Ready", lambda: api.node_ready().get(name, False), timeout_s, 0.25)
        progress(t0, f"{name} Ready")
    return name


def wait_ready(layout: Layout, names: list[str], timeout_s: float = READY_TIMEOUT_S) -> None:
    """Block until every node in ``names`` is Ready (nodes added with ``wait=False``)."""
    api = Api(layout)
    wanted = set(names)
    wait_for(f"{', '.join(sorted(wanted))} Ready", lambda: wanted <= {n for n, r in api.node_ready().items() if r},
             timeout_s, 0.25)


def _node_rec(state: dict[str, Any], name: str) -> dict[str, Any]:
    node_index(name)
    rec = state["nodes"].get(name)
    if rec is None:
        raise ClusterError(f"no node {name} in this cluster (nodes: {', '.join(state['nodes']) or 'none'})")
    assert isinstance(rec, dict)
    return rec


def stop_node(layout: Layout, state: dict[str, Any], name: str, *, graceful: bool) -> None:
    """End every process of the node and remove its link, routes and cgroups. Idempotent."""
    kill_node(state, name, graceful=graceful)
    cleanup_node(state, name)


def kill_node(state: dict[str, Any], name: str, *, graceful: bool) -> None:
    """End every process of the node: gracefully (SIGTERM to its init, which stops kubelet and
    containerd, then exits) or all at once (SIGKILL to its init: the kernel kills the whole PID
    namespace, containers included). Idempotent."""
    rec = state["nodes"].get(name, {})
    if graceful:
        stop(rec.get("init"), grace_s=15)
    elif is_alive(rec.get("init")):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(rec["init"]["pid"]), signal.SIGKILL)
        wait_gone(rec["init"], 10)
    stop(rec.get("wrapper"), grace_s=5)
    _kill_cgroup(HostNames.of(state).cgroup_parent, name)


def cleanup_node(state: dict[str, Any], name: str) -> None:
    """Remove a dead node's link, its routes (host and peers) and its cgroups. Idempotent."""
    names = HostNames.of(state)
    net.unwire_node(NodeAddr(node_index(name)), names, _peers(state, name))
    wait_for(f"{name}'s cgroups removed", lambda: not node.remove_cgroups(names.cgroup_parent, [name]), 15, 0.2)


def _kill_cgroup(parent: str, name: str) -> None:
    """SIGKILL whatever is left in the node's cgroup (ours: named after our id, made by us, the
    node recorded in our state first) and wait until it is empty."""
    def empty() -> bool:
        pids = node.cgroup_pids(parent, name)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return not pids
    wait_for(f"{name}'s cgroup to be empty", empty, 15, 0.2)


def lose_node(layout: Layout, name: str, *, once_dead: Callable[[], None] | None = None) -> float:
    """The instance is gone: every process of the node dies at once, then its Node object is deleted
    (as a cloud's node lifecycle controller does), then its link, routes, cgroups and files go.
    ``once_dead`` runs between the two: nothing on the node can act any more (a SIGTERM its kubelet
    would pass on is impossible) and no controller has replaced its pods yet (they still look bound
    to a Node). Returns when the node's processes were gone (epoch seconds). An unknown or gone node:
    ClusterError.

    The kill does not wait for the state's lock: a second node lost while the first one's cleanup held
    it (a cascade) kept running for 4 s under load, its agent joined the survivors' new round, and the
    fault was stamped at the call. The recorded processes are killed by PID (and start time) at once,
    everything that changes the state under the lock after, and the node's files (an image's hard
    links: seconds to remove) once the lock is free again."""
    t0 = time.monotonic()
    unlocked = load_state(layout)   # a read: save_state replaces the file whole
    _node_rec(unlocked, name)
    kill_node(unlocked, name, graceful=False)
    killed_at, killed = time.time(), time.monotonic() - t0
    with locked(layout):
        state = load_state(layout)
        _node_rec(state, name)
        try:
            if once_dead is not None:
                once_dead()
        finally:
            with contextlib.suppress(ClusterError):
                Api(layout).delete_node(name)
        deleted = time.monotonic() - t0
        cleanup_node(state, name)
        del state["nodes"][name]
        save_state(layout, state)
        trash = layout.node_dir(name).with_name(f".{name}.lost")
        with contextlib.suppress(FileNotFoundError):
            layout.node_dir(name).rename(trash)
    shutil.rmtree(trash, ignore_errors=True)   # under run/: `down` removes it too, should this not end
    progress(t0, f"{name} lost: its processes were gone after {killed:.2f}s, its Node deleted after {deleted:.2f}s")
    return killed_at


def set_partition(layout: Layout, name: str, partitioned: bool) -> None:
    """Link down (partitioned) or up (healed). Idempotent."""
    state = load_state(layout)
    _node_rec(state, name)
    net.set_link(NodeAddr(node_index(name)), HostNames.of(state), up=not partitioned)


def node_link(layout: Layout, name: str) -> net.NodeLink:
    """Where node ``name``'s traffic with the other nodes can be shaped (a link fault's end);
    ClusterError if there is no such node or it is not running."""
    state = load_state(layout)
    rec = _node_rec(state, name)
    if not is_alive(rec.get("init")):
        raise ClusterError(f"{name} is not running (see `elastic-chaos cluster status`)")
    return net.node_link(NodeAddr(int(rec["index"])), HostNames.of(state), int(rec["init"]["pid"]))


def set_frozen(layout: Layout, name: str, frozen: bool) -> None:
    """Freeze (or thaw) every process of the node at once: kubelet, containerd and its containers
    stop where they are, sockets stay open (a hung host). The cgroup v1 freezer of its subtree.
    Idempotent."""
    state = load_state(layout)
    _node_rec(state, name)
    node.set_frozen(HostNames.of(state).cgroup_parent, name, frozen)


def freezer_state(layout: Layout, name: str) -> Path:
    """The node's ``freezer.state`` file (a straggler's duty cycle writes it directly)."""
    state = load_state(layout)
    _node_rec(state, name)
    return node.freezer_state(HostNames.of(state).cgroup_parent, name)


def node_pids(layout: Layout, name: str) -> dict[int, str]:
    """Host PID -> command name of every process of the node (init, containerd, kubelet, shims, containers)."""
    state = load_state(layout)
    _node_rec(state, name)
    return {pid: node.comm(pid) for pid in node.cgroup_pids(HostNames.of(state).cgroup_parent, name)}


def pod_pids(layout: Layout, name: str, pod_uid: str) -> dict[int, str] | None:
    """Host PID -> command name of every process of pod ``pod_uid`` on node ``name``; None when
    the node does not hold it (not there, already removed, or no such node in this cluster)."""
    state = load_state(layout)
    if name not in state["nodes"]:
        return None
    return node.pod_pids(HostNames.of(state).cgroup_parent, name, pod_uid)


# ---- down ------------------------------------------------------------------------------------------

def keep_logs(layout: Layout) -> Path:
    """Copy the run's logs to ``build/failed-up-logs`` (``down`` keeps the build), replacing an
    older copy; returns that folder."""
    kept = layout.build / "failed-up-logs"
    shutil.rmtree(kept, ignore_errors=True)
    if layout.logs.is_dir():
        shutil.copytree(layout.logs, kept, symlinks=True)
    else:
        kept.mkdir(parents=True, exist_ok=True)
    return kept


class NoCluster(ClusterError):
    """``down`` where no cluster's state is: nothing was touched (status's "down" exit code, 3)."""

    def __init__(self, layout: Layout) -> None:
        super().__init__(f"no cluster here: no state in {layout.run} (nothing was touched; "
                         "ELASTIC_CHAOS_CLUSTER_DIR names another cluster's folder)", exit_code=3)


def down(layout: Layout) -> None:
    """Stop every process by PID and remove every link, rule, cgroup and file the state records.
    Idempotent; works after a crashed ``up`` (state written before each resource is made).
    NoCluster (touching nothing, creating nothing) when there is no state;
    SetupError (before anything is done) when a command it needs is missing."""
    if not has_cluster(load_state(layout)):
        raise NoCluster(layout)
    require_commands(("iptables", "ip"), "to remove the cluster's network")
    with locked(layout):
        state = load_state(layout)
        if not has_cluster(state):   # brought down by another command while we waited for the lock
            raise NoCluster(layout)
        _down(layout, state)


def _down(layout: Layout, state: dict[str, Any]) -> None:
    t0, names = time.monotonic(), HostNames.of(state)
    for rec in state["nodes"].values():  # all nodes stop at once; each init stops kubelet and containerd
        with contextlib.suppress(ProcessLookupError):
            if is_alive(rec.get("init")):
                os.kill(int(rec["init"]["pid"]), signal.SIGTERM)
    for name in sorted(state["nodes"], key=node_index):
        stop_node(layout, state, name, graceful=True)
    if state["nodes"]:
        progress(t0, f"nodes stopped: {', '.join(sorted(state['nodes'], key=node_index))}")
    for comp in [*reversed(COMPONENTS), "template-containerd"]:
        stop(state["procs"].get(comp), grace_s=10)
    unshare_checkpoint_folder(state)   # before the folder is removed: never walk a mount on it
    net.teardown_host(state)
    wait_for("our cgroups removed", lambda: not node.remove_cgroups(
        names.cgroup_parent, sorted(state["nodes"]), with_parent=names.cluster_id is not None), 15, 0.2)
    progress(t0, f"control plane stopped; bridge {names.bridge}, its veths, iptables chains and cgroups removed")
    shutil.rmtree(layout.run, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        layout.kubeconfig.unlink()
    progress(t0, f"{layout.run} removed")
