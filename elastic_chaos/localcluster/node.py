"""A node of the local cluster: one containerd + one kubelet in namespaces of their own.

A node is started as ``unshare --pid --net --mount`` around ``python3 -m
elastic_chaos.localcluster _node-init`` (:func:`node_init`), which is PID 1 of the node's PID namespace.
So the node is one process tree that a single SIGKILL ends at once, kubelet,
containerd, shims and every container included: the instance is gone. It is
also one cgroup subtree (``/PARENT/NODE`` in every hierarchy, PARENT the
cluster's own ``elastic-chaos-cluster-<id>``; the kubelet's cgroup root is
``/PARENT/NODE/pods``), which is how its host PIDs and its memory are read.

In its mount namespace the node binds private folders over ``/run`` (containerd's
shim sockets, the xtables lock), ``/var/lib`` (the kubelet's hard-coded
device-plugin folder, the CNI cache), ``/var/log`` (``/var/log/pods``: kubelets
garbage-collect log folders of pods they do not know) and ``/tmp``, so two
nodes share nothing and the host keeps nothing of them. Pod network
namespaces stay under containerd's state folder. Its mounts die with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from elastic_chaos.localcluster.api import Api
from elastic_chaos.localcluster.base import (
    CAPACITY_LABEL,
    KUBELET_PORT,
    SPOT_TAINT,
    ClusterError,
    Layout,
    NodeAddr,
    keep,
    run,
    start_time,
)
from elastic_chaos.localcluster.net import NODE_NAT_RULES
from elastic_chaos.localcluster.pki import BRIDGE_SERVER

CNI_BIN = "/usr/lib/cni"
PRIVATE_DIRS = {"run": "/run", "var-lib": "/var/lib", "var-log": "/var/log", "tmp": "/tmp"}


# ---- cgroups -------------------------------------------------------------------------------------

def hierarchies() -> list[Path]:
    """Mount points of every cgroup hierarchy (v1 controllers, named ones, and the v2 one)."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if fields[2] in ("cgroup", "cgroup2"):
            found.append(Path(fields[1]))
    return found


def node_cgroups(parent: str, name: str) -> list[Path]:
    """The node's cgroup in every hierarchy: ``<hierarchy>/<parent>/<name>`` (``parent``: the cluster's own)."""
    return [h / parent / name for h in hierarchies()]


def make_cgroups(parent: str, name: str) -> None:
    """``/PARENT/NAME/pods`` in every hierarchy (the kubelet needs its root in each), cpuset filled."""
    for h in hierarchies():
        path = h
        for part in (parent, name, "pods"):
            above, path = path, path / part
            path.mkdir(exist_ok=True)
            for knob in ("cpuset.cpus", "cpuset.mems"):
                if (path / knob).exists() and not (path / knob).read_text().strip():
                    (path / knob).write_text((above / knob).read_text())


def cgroup_pids(parent: str, name: str) -> list[int]:
    """Host PIDs of every process in the node's cgroup subtree (read from its ``pids``-like hierarchy)."""
    pids: set[int] = set()
    for top in node_cgroups(parent, name):
        if not top.exists():
            continue
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in procs.read_text().split())
    return sorted(pids)


def pod_pids(parent: str, name: str, pod_uid: str) -> dict[int, str] | None:
    """Host PID -> command name of every process in the pod's cgroups on node ``name`` (the
    kubelet names them ``pod<UID>``, dashes as underscores under the systemd driver); None
    when no hierarchy of the node holds the pod (not there, or already removed)."""
    try:
        return _pod_pids(parent, name, pod_uid)
    except OSError:   # a cgroup removed while it was walked (the pod going away): cannot tell yet
        return None


def _pod_pids(parent: str, name: str, pod_uid: str) -> dict[int, str] | None:
    marks = {f"pod{pod_uid}", f"pod{pod_uid.replace('-', '_')}"}
    found: dict[int, str] | None = None
    for top in node_cgroups(parent, name):
        if not top.exists():
            continue
        for d in top.rglob("pod*"):
            if not any(d.name == m or d.name.endswith(m + ".slice") for m in marks):
                continue
            found = found if found is not None else {}
            for procs in d.rglob("cgroup.procs"):
                with contextlib.suppress(OSError, ValueError):
                    for pid in procs.read_text().split():
                        found[int(pid)] = comm(int(pid))
    return found


def comm(pid: int) -> str:
    """A process's command name ('' once it is gone)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def freezer_state(parent: str, name: str) -> Path:
    """The node's cgroup v1 ``freezer.state``; ClusterError when there is no freezer hierarchy."""
    freezer = next((p for p in node_cgroups(parent, name) if (p / "freezer.state").exists()), None)
    if freezer is None:
        raise ClusterError(f"{name} has no freezer cgroup (a cgroup v1 freezer hierarchy is needed to freeze a node)")
    return freezer / "freezer.state"


def set_frozen(parent: str, name: str, frozen: bool) -> None:
    """The node's freezer cgroup to FROZEN or THAWED; blocks until the kernel says it is."""
    state = freezer_state(parent, name)
    want = "FROZEN" if frozen else "THAWED"
    state.write_text(want)
    deadline = time.monotonic() + 10
    while state.read_text().strip() != want:
        if time.monotonic() > deadline:
            raise ClusterError(f"{name} did not become {want} within 10s")
        time.sleep(0.02)


def remove_cgroups(parent: str, names: list[str], *, with_parent: bool = False) -> list[Path]:
    """rmdir the cgroups of the nodes ``names`` (each subtree, deepest first), then, with
    ``with_parent``, the parent itself (only: an rmdir, which fails while anything else is in it).
    Nothing outside those subtrees is touched. Returns the folders left."""
    left = []
    for h in hierarchies():
        for name in names:
            top = h / parent / name
            if not top.exists():
                continue
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [top]:
                try:
                    d.rmdir()
                except OSError:
                    left.append(d)
        if with_parent and (h / parent).exists():
            try:
                (h / parent).rmdir()
            except OSError:
                left.append(h / parent)
    return left


def memory_bytes(parent: str, name: str) -> int:
    """Proportional set size (PSS) of the node's processes: shared binary text counted once across
    nodes. (The memory cgroup's charge is no measure here: pages are charged to whichever node
    touched them first.)"""
    total_kb = 0
    for pid in cgroup_pids(parent, name):
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total_kb += int(line.split()[1])
    return total_kb * 1024


# ---- configuration files -------------------------------------------------------------------------

def node_config(layout: Layout, addr: NodeAddr, cgroup_parent: str, images: list[str]) -> dict[str, Any]:
    """Everything ``_node-init`` needs, written to ``NODE_DIR/node.json``; ``images``: tars to import."""
    d = layout.node_dir(addr.name)
    return {
        "name": addr.name,
        "dir": str(d),
        "cgroups": [str(p) for p in node_cgroups(cgroup_parent, addr.name)],
        "containerd": ["containerd", "--config", str(d / "containerd.toml")],
        "socket": str(d / "containerd" / "containerd.sock"),
        "images": images,
        "kubelet": [
            str(layout.bin / "kubelet"),
            f"--config={d / 'kubelet.yaml'}",
            f"--kubeconfig={d / 'kubelet.kubeconfig'}",
            f"--root-dir={d / 'kubelet'}",
            f"--cert-dir={d / 'kubelet' / 'pki'}",
            f"--hostname-override={addr.name}",
            f"--node-ip={addr.ip}",
            f"--node-labels=elastic-chaos.io/node-index={addr.index},"
            f"{CAPACITY_LABEL}={'SPOT' if addr.spot else 'ON_DEMAND'}",
            *([f"--register-with-taints={SPOT_TAINT}"] if addr.spot else []),
            "--container-runtime=remote",
            f"--container-runtime-endpoint=unix://{d / 'containerd' / 'containerd.sock'}",
            f"--pod-infra-container-image={(layout.images / 'pause.ref').read_text().strip()}",
            "--oom-score-adj=0",  # no CAP_SYS_RESOURCE: the default -999 cannot be set
            "--v=1",
        ],
        "logs": {"containerd": str(layout.logs / f"containerd-{addr.name}.log"),
                 "kubelet": str(layout.logs / f"kubelet-{addr.name}.log")},
        "nat_rules": NODE_NAT_RULES,
        "pod_cidr": addr.pod_cidr,
        "layout_root": str(layout.root),
    }


def write_configs(layout: Layout, addr: NodeAddr, cgroup_parent: str, images: list[str]) -> None:
    """containerd.toml, kubelet.yaml, the CNI conflist and node.json in the node's folder."""
    d = layout.node_dir(addr.name)
    for sub in ["containerd", "kubelet/manifests", "cni/net.d", *PRIVATE_DIRS]:
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "tmp").chmod(0o1777)
    (d / "containerd.toml").write_text(CONTAINERD_TOML.format(
        d=d, sandbox=(layout.images / "pause.ref").read_text().strip(), cni=CNI_BIN))
    (d / "kubelet.yaml").write_text(KUBELET_YAML.format(
        d=d, ip=addr.ip, port=KUBELET_PORT, ca=layout.pki / "ca.crt", cgroup_root=f"/{cgroup_parent}/{addr.name}/pods"))
    (d / "cni" / "net.d" / "10-elastic-chaos.conflist").write_text(json.dumps({
        "cniVersion": "0.4.0", "name": "elastic-chaos",
        "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": addr.pod_cidr}]],
                              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(d / "cni" / "ipam")}}],
    }, indent=1))
    (d / "node.json").write_text(json.dumps(node_config(layout, addr, cgroup_parent, images), indent=1))


CONTAINERD_TOML = """\
version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
oom_score = 0
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{d}/containerd/containerd.sock"
[ttrpc]
  address = "{d}/containerd/containerd.sock.ttrpc"
[debug]
  level = "warn"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox}"
  disable_apparmor = true
  # root here lacks CAP_SYS_RESOURCE: without this every pod fails with
  # "can't get final child's PID from pipe" (runc cannot set oom_score_adj=-998)
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni}"
    conf_dir = "{d}/cni/net.d"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        Root = "{d}/containerd/runc"
        SystemdCgroup = false
"""

KUBELET_YAML = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {ip}
port: {port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {ca}}}
authorization: {{mode: Webhook}}
cgroupDriver: cgroupfs
cgroupRoot: {cgroup_root}
failSwapOn: false
makeIPTablesUtilChains: false
volumePluginDir: {d}/kubelet/volume-plugins
staticPodPath: {d}/kubelet/manifests
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
evictionHard: {{memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# CSIMigration (beta, on in 1.20) holds Ready back until the CSINode object is made, which the
# kubelet retries with backoff (15 ms x 6^n): a kubelet that registers 6 s after its start (its
# cAdvisor probes for docker 5 x 1 s) is Ready only ~23 s after it. No in-tree cloud volumes here.
featureGates: {{CSIMigration: false}}
"""


# ---- starting a node (host side) -----------------------------------------------------------------

def spawn_node(layout: Layout, addr: NodeAddr) -> tuple[subprocess.Popen[bytes], int]:
    """Start the node's namespaces and its init, which waits for ``go`` on stdin; (wrapper, init host PID)."""
    args = ["unshare", "--pid", "--fork", "--mount-proc", "--net", "--mount", "--propagation", "slave",
            "--kill-child", "--", sys.executable, "-m", __package__ or "elastic_chaos.localcluster",
            "_node-init", str(layout.node_dir(addr.name))]
    # the init imports this package: wherever this process found it (an editable install, PYTHONPATH)
    root = str(Path(__file__).resolve().parents[4])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    log_path = layout.logs / f"node-{addr.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        wrapper = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True, env=env)
    keep(wrapper)   # the node outlives this process on purpose; its wrapper is reaped when it is stopped
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        child = _child_of(wrapper.pid)
        if child:
            return wrapper, child
        if wrapper.poll() is not None:
            break
        time.sleep(0.02)
    raise ClusterError(f"{addr.name}: unshare did not start its init (see {log_path})")


def _child_of(ppid: int) -> int | None:
    """The (only) child of ``ppid``: from /proc/PID/task/PID/children, else a scan of /proc/*/stat."""
    with contextlib.suppress(OSError):
        children = Path(f"/proc/{ppid}/task/{ppid}/children").read_text().split()
        return int(children[0]) if children else None
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            if int(text[text.rindex(")") + 2:].split()[1]) == ppid:
                return int(stat.parent.name)
    return None


def record(pid: int) -> dict[str, Any]:
    return {"pid": pid, "start": start_time(pid)}


# ---- the node's init (PID 1 inside the node) -----------------------------------------------------

class _Init:
    """PID 1 of a node: sets the node up, starts containerd and kubelet, reaps, stops them on SIGTERM."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.stopping = False

    def say(self, msg: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {self.cfg['name']} init: {msg}", flush=True)

    def join_cgroups(self) -> None:
        for cg in self.cfg["cgroups"]:
            Path(cg, "cgroup.procs").write_text("0")

    def wait_go(self) -> None:
        ready, _, _ = select.select([sys.stdin], [], [], 60)
        if not ready or sys.stdin.readline().strip() != "go":
            raise SystemExit("no 'go' from the host within 60s: giving up")

    def private_mounts(self) -> None:
        d = Path(self.cfg["dir"])
        for sub, target in PRIVATE_DIRS.items():
            run(["mount", "--bind", str(d / sub), target])

    def network(self) -> None:
        Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
        for rule in self.cfg["nat_rules"]:
            run(["iptables", "-w", "5", "-t", "nat", "-A", *rule])

    def start(self, what: str, args: list[str]) -> None:
        with open(self.cfg["logs"][what], "ab") as out:
            self.children[what] = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out,
                                                   stderr=subprocess.STDOUT)
        self.say(f"{what} started (pid {self.children[what].pid} in the node)")

    def containerd(self) -> None:
        self.start("containerd", self.cfg["containerd"])
        sock = Path(self.cfg["socket"])
        deadline = time.monotonic() + 30
        while not sock.exists():
            if time.monotonic() > deadline or self.children["containerd"].poll() is not None:
                raise SystemExit(f"containerd did not open {sock}: see {self.cfg['logs']['containerd']}")
            time.sleep(0.1)

    def import_images(self) -> None:
        for tar in self.cfg["images"]:
            t0 = time.monotonic()
            run(["ctr", "--address", self.cfg["socket"], "-n", "k8s.io", "images", "import", tar], timeout_s=600)
            self.say(f"imported {Path(tar).name} in {time.monotonic() - t0:.1f}s")

    def kubelet(self) -> None:
        self.start("kubelet", self.cfg["kubelet"])

    def assign_pod_cidr(self) -> None:
        """Our IPAM: put the node's pod range on its Node object once registered (bounded: 120 s)."""
        api = Api(Layout(Path(self.cfg["layout_root"])), server=BRIDGE_SERVER)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not self.stopping:
            try:
                if api.set_pod_cidr(self.cfg["name"], self.cfg["pod_cidr"]):
                    self.say(f"podCIDR {self.cfg['pod_cidr']} set on the Node")
                    return
            except ClusterError as e:
                self.say(f"podCIDR not set yet: {e}")
            time.sleep(0.2)
        self.say("gave up setting the podCIDR (the kubelet turns Ready at its next status update anyway)")

    def on_term(self, signum: int, _frame: object) -> None:
        self.stopping = True
        for what in ("kubelet", "containerd"):
            proc = self.children.get(what)
            if proc and proc.poll() is None:
                proc.terminate()

    def reap_forever(self) -> None:
        """Reap children for the node's lifetime; after SIGTERM, return once kubelet and containerd
        exited (at most 10 s later)."""
        deadline: float | None = None
        while True:
            if self.stopping and deadline is None:
                deadline = time.monotonic() + 10
            if deadline is not None and (time.monotonic() > deadline or
                                         all(p.poll() is not None for p in self.children.values())):
                self.say("stopped")
                return  # PID 1 exits: the kernel kills whatever is left in the node
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)  # any child: orphaned shims are ours to reap
            except ChildProcessError:
                pid, status = 0, 0
            for what, proc in self.children.items():
                if pid and proc.pid == pid:
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    self.say(f"{what} exited ({proc.returncode})")
            if pid == 0:
                time.sleep(0.2)

    def main(self) -> None:
        signal.signal(signal.SIGTERM, self.on_term)
        steps: list[Callable[[], None]] = [
            self.join_cgroups, self.wait_go, self.private_mounts, self.network, self.containerd,
            self.import_images, self.kubelet]
        for step in steps:
            if self.stopping:  # SIGTERM while setting up: exit, the kernel ends the rest
                return
            step()
        threading.Thread(target=self.assign_pod_cidr, daemon=True).start()
        self.reap_forever()


def node_init(node_dir: str) -> int:
    """Entry point of ``_node-init NODE_DIR`` (PID 1 of a node; not for direct use)."""
    cfg = json.loads(Path(node_dir, "node.json").read_text())
    _Init(cfg).main()
    return 0


