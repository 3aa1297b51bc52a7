"""The operations on the local cluster: up, down, and the node lifecycle the toolkit's faults use.

Contract of every operation: it blocks until done (or a bounded timeout, then
ClusterError), takes the cluster lock, and records each resource in the state
before making it, so :func:`down` can always undo it — after a crash too.
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

from chaos.platforms.kubernetes.localcluster import net, node
from chaos.platforms.kubernetes.localcluster.api import Api
from chaos.platforms.kubernetes.localcluster.base import (
    API_PORT,
    BRIDGE,
    CAPACITY_LABEL,
    CGROUP_PARENT,
    CONTROLLER_MANAGER_PORT,
    ETCD_CLIENT_PORT,
    ETCD_PEER_PORT,
    HOST_IP,
    MAX_NODES,
    METADATA_PORTS,
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
from chaos.platforms.kubernetes.localcluster.control import COMPONENTS, start_component
from chaos.platforms.kubernetes.localcluster.deps import check_ready_to_run
from chaos.platforms.kubernetes.localcluster.pki import (
    BRIDGE_SERVER,
    LOCAL_SERVER,
    make_control_plane_pki,
    make_node_cert,
    write_kubeconfig,
)
from chaos.platforms.kubernetes.localcluster.template import IMAGE_TARS, clone, ensure_template

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
        if state["procs"] or state["nodes"] or state.get("host_net"):
            broken = health(layout, state)
            if not broken:
                _complete(layout, state, nodes, t0, timeout_s)
                return
            progress(t0, f"not healthy ({', '.join(broken)}): tearing it down and starting again")
            _down(layout, state)
            state = load_state(layout)
        _fresh_up(layout, state, nodes, t0, timeout_s)


def _fresh_up(layout: Layout, state: dict[str, Any], nodes: int, t0: float, timeout_s: float) -> None:
    _check_ports()
    for d in (layout.run, layout.logs):
        d.mkdir(parents=True, exist_ok=True)
    make_control_plane_pki(layout)
    net.setup_host(state)
    save_state(layout, state)
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


def profile(layout: Layout) -> dict[str, str]:
    """What the toolkit needs to know about this cluster (the ``kube-public/elastic-chaos-cluster``
    ConfigMap, read by chaos.platforms.kubernetes.profile): who operates its machines, the image
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
    broken = [c for c in COMPONENTS if not is_alive(state["procs"].get(c))]
    if not net.link_exists(BRIDGE):
        broken.append(f"bridge {BRIDGE}")
    for name, rec in state["nodes"].items():
        if not is_alive(rec.get("init")):
            broken.append(name)
            continue
        comms = {node.comm(pid) for pid in node.cgroup_pids(name)}
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
    addr = NodeAddr(int(state["next_index"]))
    if addr.index > MAX_NODES:
        raise ClusterError(f"node indexes are used up ({MAX_NODES}): `elastic-chaos cluster down` and up again")
    state["next_index"] = addr.index + 1
    state["nodes"][addr.name] = {"index": addr.index}
    save_state(layout, state)
    make_node_cert(layout, addr.name)
    write_kubeconfig(layout, layout.node_dir(addr.name) / "kubelet.kubeconfig", f"kubelet-{addr.name}", BRIDGE_SERVER)
    node.make_cgroups(addr.name)
    if template is not None:
        clone(template, layout.node_dir(addr.name) / "containerd" / "root")
        images = []
    else:
        images = [str(layout.images / t) for t in IMAGE_TARS]
    node.write_configs(layout, addr, images)
    wrapper, init_pid = node.spawn_node(layout, addr)
    state["nodes"][addr.name].update(wrapper=node.record(wrapper.pid), init=node.record(init_pid))
    save_state(layout, state)
    net.wire_node(addr, init_pid, _peers(state, addr.name))
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
    node.forget_ended()
    _kill_cgroup(name)


def cleanup_node(state: dict[str, Any], name: str) -> None:
    """Remove a dead node's link, its routes (host and peers) and its cgroups. Idempotent."""
    net.unwire_node(NodeAddr(node_index(name)), _peers(state, name))
    wait_for(f"{name}'s cgroups removed", lambda: not node.remove_cgroups(name), 15, 0.2)


def _kill_cgroup(name: str | None) -> None:
    """SIGKILL whatever is left in our cgroups (they are ours: we made them) and wait until empty."""
    def empty() -> bool:
        names = [name] if name else _cgroup_nodes()
        pids = [p for n in names for p in node.cgroup_pids(n)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return not pids
    wait_for("our cgroups to be empty", empty, 15, 0.2)


def _cgroup_nodes() -> list[str]:
    """Names of the node cgroups under our own parent (only ``ec-node-N``: nothing else is touched)."""
    names: set[str] = set()
    for h in node.hierarchies():
        with contextlib.suppress(OSError):
            names.update(p.name for p in (h / CGROUP_PARENT).iterdir() if p.is_dir() and _is_node_name(p.name))
    return sorted(names)


def _is_node_name(name: str) -> bool:
    try:
        node_index(name)
    except ClusterError:
        return False
    return True


def lose_node(layout: Layout, name: str, *, once_dead: Callable[[], None] | None = None) -> float:
    """The instance is gone: every process of the node dies at once, then its Node object is deleted
    (as a cloud's node lifecycle controller does), then its link, routes, cgroups and files go.
    ``once_dead`` runs between the two: nothing on the node can act any more (a SIGTERM its kubelet
    would pass on is impossible) and no controller has replaced its pods yet (they still look bound
    to a Node). Returns the seconds from the call to the Node's deletion. An unknown or gone node:
    ClusterError."""
    t0 = time.monotonic()
    with locked(layout):
        state = load_state(layout)
        _node_rec(state, name)
        kill_node(state, name, graceful=False)
        killed = time.monotonic() - t0
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
        shutil.rmtree(layout.node_dir(name), ignore_errors=True)
    progress(t0, f"{name} lost: its processes were gone after {killed:.2f}s, its Node deleted after {deleted:.2f}s")
    return deleted


def set_partition(layout: Layout, name: str, partitioned: bool) -> None:
    """Link down (partitioned) or up (healed). Idempotent."""
    state = load_state(layout)
    _node_rec(state, name)
    net.set_link(NodeAddr(node_index(name)), up=not partitioned)


def set_frozen(layout: Layout, name: str, frozen: bool) -> None:
    """Freeze (or thaw) every process of the node at once: kubelet, containerd and its containers
    stop where they are, sockets stay open (a hung host). The cgroup v1 freezer of its subtree.
    Idempotent."""
    _node_rec(load_state(layout), name)
    node.set_frozen(name, frozen)


def freezer_state(layout: Layout, name: str) -> Path:
    """The node's ``freezer.state`` file (a straggler's duty cycle writes it directly)."""
    _node_rec(load_state(layout), name)
    return node.freezer_state(name)


def node_pids(layout: Layout, name: str) -> dict[int, str]:
    """Host PID -> command name of every process of the node (init, containerd, kubelet, shims, containers)."""
    _node_rec(load_state(layout), name)
    return {pid: node.comm(pid) for pid in node.cgroup_pids(name)}


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


def down(layout: Layout) -> None:
    """Stop every process by PID and remove every namespace, link, rule, cgroup and file of the run.
    Idempotent; works after a crashed ``up`` (state written before each resource is made)."""
    with locked(layout):
        _down(layout, load_state(layout))


def _down(layout: Layout, state: dict[str, Any]) -> None:
    t0 = time.monotonic()
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
    _kill_cgroup(None)
    net.teardown_host()
    wait_for("our cgroups removed", lambda: not node.remove_cgroups(), 15, 0.2)
    progress(t0, "control plane stopped; bridge, veths, iptables rules and cgroups removed")
    shutil.rmtree(layout.run, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        layout.kubeconfig.unlink()
    progress(t0, f"{layout.run} removed")
