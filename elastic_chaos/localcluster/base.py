"""What every part of the local cluster shares: its layout, its state file, and its processes.

The cluster is a set of host resources (processes, a bridge, veths, routes,
iptables rules, cgroups) that must all be found again by ``down``, even after
an ``up`` that crashed half way. So every resource is written to the state
file *before* it is made, every process is started here with its PID (and
its start time, against PID reuse) recorded, and every process is stopped by
that PID. Nothing is ever looked up or killed by name.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import fcntl
import ipaddress
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

def default_root() -> Path:
    """Where the cluster lives: ``$ELASTIC_CHAOS_CLUSTER_DIR``, else ``.cluster`` in the current folder
    (the repository's, for ``make cluster-up``)."""
    return Path(os.environ.get("ELASTIC_CHAOS_CLUSTER_DIR") or Path.cwd() / ".cluster").resolve()

# Addresses and ports. Nothing here listens on the machine's external interface:
# control-plane servers bind 127.0.0.1; kubelets bind their node address inside
# their own network namespace; the API server is reached from the node bridge
# through a DNAT rule to 127.0.0.1 (see cluster_net).
# The bridge, veths, iptables chains and cgroups are named after the cluster's id: see names.py.
HOST_NET = ipaddress.ip_network("10.87.0.0/24")
HOST_IP = "10.87.0.1"
POD_NETS = ipaddress.ip_network("10.88.0.0/16")
SERVICE_NET = "10.96.0.0/24"
KUBERNETES_SERVICE_IP = "10.96.0.1"
API_PORT = 16443
ETCD_CLIENT_PORT = 23791
ETCD_PEER_PORT = 23801
CONTROLLER_MANAGER_PORT = 10257
SCHEDULER_PORT = 10259
KUBELET_PORT = 10250
METADATA_PORTS = (16480, 16489)
"""The host accepts these from the bridge (besides the API port): the toolkit's spot-notice
stand-in (an instance metadata service) listens on ``HOST_IP`` there while a run needs one."""
NODE_PREFIX = "ec-node-"
# Shaped like kind/cluster.yaml and an EKS spot node group: node 1 is on-demand capacity (the
# job's etcd goes there, and no fault aims at it), every other node spot capacity, tainted.
CAPACITY_LABEL = "eks.amazonaws.com/capacityType"
SPOT_TAINT = "elastic-chaos/spot=true:NoSchedule"
PROFILE_NAMESPACE, PROFILE_NAME = "kube-public", "elastic-chaos-cluster"
"""The ConfigMap that tells the toolkit what this cluster is (elastic_chaos.platforms.kubernetes.profile)."""
MAX_NODES = 200


class ClusterError(Exception):
    """A failure with a message that says what to do; ``exit_code`` 2 is a setup error."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class SetupError(ClusterError):
    """Not root, a package or a build output missing: exit code 2."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=2)


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where everything lives. ``build`` survives ``down``; ``run`` does not."""

    root: Path = dataclasses.field(default_factory=default_root)

    @property
    def build(self) -> Path:
        return self.root / "build"

    @property
    def bin(self) -> Path:
        return self.build / "bin"

    @property
    def images(self) -> Path:
        return self.build / "images"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def state_file(self) -> Path:
        return self.run / "state.json"

    @property
    def pki(self) -> Path:
        return self.run / "pki"

    @property
    def logs(self) -> Path:
        return self.run / "logs"

    @property
    def shared(self) -> Path:
        """The checkpoint volume every node mounts (a hostPath: the nodes share this machine's disk,
        as pods share an EFS/FSx volume); part of the run, removed by ``down``."""
        return self.run / "shared"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def lock_file(self) -> Path:
        return self.root / ".lock"

    def node_dir(self, name: str) -> Path:
        return self.run / "nodes" / name


@dataclasses.dataclass(frozen=True)
class NodeAddr:
    """The addresses of node number ``index`` (1-based, never reused within one cluster)."""

    index: int

    @property
    def name(self) -> str:
        return f"{NODE_PREFIX}{self.index}"

    @property
    def ip(self) -> str:
        return str(HOST_NET.network_address + 10 + self.index)

    @property
    def pod_cidr(self) -> str:
        return str(ipaddress.ip_network(f"10.88.{self.index}.0/24"))

    @property
    def spot(self) -> bool:
        """Every node but the first is spot capacity (tainted: only pods that tolerate it run there)."""
        return self.index != 1


def node_index(name: str) -> int:
    """``ec-node-3`` -> 3; a ClusterError for any other name."""
    if name.startswith(NODE_PREFIX) and name[len(NODE_PREFIX):].isdigit():
        index = int(name[len(NODE_PREFIX):])
        if 1 <= index <= MAX_NODES:
            return index
    raise ClusterError(f"{name!r} is not a node of this cluster (names are {NODE_PREFIX}N): "
                       "see `elastic-chaos cluster status`")


# ---- state ---------------------------------------------------------------------------------------

def load_state(layout: Layout) -> dict[str, Any]:
    """The state file's content; an empty state when there is none (or it is unreadable)."""
    try:
        data = json.loads(layout.state_file.read_text())
    except (OSError, ValueError):
        return {"procs": {}, "nodes": {}, "next_index": 1}
    if not isinstance(data, dict):
        return {"procs": {}, "nodes": {}, "next_index": 1}
    data.setdefault("procs", {})
    data.setdefault("nodes", {})
    data.setdefault("next_index", 1)
    return data


def save_state(layout: Layout, state: dict[str, Any]) -> None:
    """Write the state atomically (a crash leaves the old or the new file, never half of one)."""
    layout.run.mkdir(parents=True, exist_ok=True)
    tmp = layout.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    os.replace(tmp, layout.state_file)


@contextlib.contextmanager
def locked(layout: Layout, timeout_s: float = 600.0) -> Iterator[None]:
    """Serialise commands that change the cluster (one at a time); waits at most ``timeout_s``."""
    layout.root.mkdir(parents=True, exist_ok=True)
    with open(layout.lock_file, "w") as fh:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"another cluster command has held {layout.lock_file} for {timeout_s:.0f}s") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# ---- commands and processes ----------------------------------------------------------------------

def run(args: Sequence[str], *, check: bool = True, timeout_s: float = 120.0, quiet: bool = False) -> str:
    """Run a command to completion and return its stdout; ClusterError (with stderr) when it fails."""
    try:
        proc = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        raise ClusterError(f"{' '.join(args)} did not finish in {timeout_s:.0f}s") from e
    except FileNotFoundError as e:   # the command itself is not installed: a setup error, never a traceback
        raise SetupError(f"{args[0]} is not installed (or not on PATH); `elastic-chaos cluster deps` names "
                         "the Debian package to install") from e
    if check and proc.returncode != 0:
        raise ClusterError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    if not quiet and proc.returncode != 0:
        log.debug("%s -> %s: %s", " ".join(args), proc.returncode, proc.stderr.strip())
    return proc.stdout


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] == "Z":  # a zombie is as good as gone
        return None
    return int(fields[19])


def is_alive(rec: dict[str, Any] | None) -> bool:
    """True when the recorded process (``{"pid", "start"}``) still runs (same PID *and* start time)."""
    return rec is not None and start_time(int(rec["pid"])) == rec["start"]


_SPAWNED: dict[int, subprocess.Popen[bytes]] = {}
"""What this process started (:func:`spawn`, a node's wrapper), by PID, kept referenced until reaped: the
callers keep the record, not the Popen, and a Popen dropped before its returncode is set is garbage-
collected with a ResourceWarning (a test that added a node, whose node template's containerd was stopped
through its record, failed so)."""


def keep(proc: subprocess.Popen[bytes]) -> None:
    """Hold ``proc`` until :func:`wait_gone` reaps it, or this process exits (it may outlive it)."""
    _SPAWNED[proc.pid] = proc


def _settled(pid: int, status: int | None) -> None:
    """``pid`` ended (``status`` from waitpid; None: reaped elsewhere): its Popen says so, and is let go."""
    proc = _SPAWNED.pop(pid, None)
    if proc is not None and proc.returncode is None:
        proc.returncode = os.waitstatus_to_exitcode(status) if status is not None else 0


def _outlive_this_process() -> None:
    """At exit: the processes still running are the cluster's machines and components, which outlive the
    process that started them on purpose (a replacement node a test added; ``cluster down`` stops each by
    the PID the cluster recorded). Marked as such, so that Popen does not report each as a leaked
    'subprocess still running' (a CI log showed three)."""
    for proc in _SPAWNED.values():
        if proc.poll() is None:
            proc.returncode = 0   # not waited for here: the cluster's own record stops it


atexit.register(_outlive_this_process)


def spawn(args: Sequence[str], log_path: Path, *, stdin: int | IO[Any] | None = subprocess.DEVNULL,
          env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """Start a long-running process in its own session, output to ``log_path``; returns it and its record."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(list(args), stdin=stdin, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)
    keep(proc)
    start = start_time(proc.pid)
    rec = {"pid": proc.pid, "start": start, "args": list(args)[:1], "log": str(log_path)}
    return proc, rec


def stop(rec: dict[str, Any] | None, *, grace_s: float = 10.0, sig: int = signal.SIGTERM) -> None:
    """Stop one recorded process: ``sig``, then SIGKILL after ``grace_s``. Idempotent; a gone process is fine."""
    if not is_alive(rec):
        return
    assert rec is not None
    pid = int(rec["pid"])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    if wait_gone(rec, grace_s):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not wait_gone(rec, 10.0):
        raise ClusterError(f"process {pid} ({rec.get('args')}) survived SIGKILL for 10s")


def wait_gone(rec: dict[str, Any], timeout_s: float) -> bool:
    """Wait (at most ``timeout_s``) for a recorded process to exit; reaps it when it is our child."""
    deadline, pid = time.monotonic() + timeout_s, int(rec["pid"])
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            reaped, status = os.waitpid(pid, os.WNOHANG)
            if reaped:
                _settled(pid, status)
        if not is_alive(rec):
            _settled(pid, None)
            return True
        time.sleep(0.05)
    gone = not is_alive(rec)
    if gone:
        _settled(pid, None)
    return gone


def wait_for(what: str, check: Any, timeout_s: float, interval_s: float = 0.25) -> Any:
    """Poll ``check()`` until it returns something truthy (returned) or ``timeout_s`` passes (ClusterError)."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
        except (OSError, ClusterError, ValueError) as e:
            last_error, result = e, None
        if result:
            return result
        time.sleep(interval_s)
    raise ClusterError(f"timed out after {timeout_s:.0f}s waiting for {what}"
                       + (f" (last error: {last_error})" if last_error else ""))
