"""The c10d rendezvous store on local nodes: which node hosts it, when the others may start, who can reach it.

With ``--rdzv-backend c10d`` whichever agent binds the store's port first hosts the store; the local
platform starts node-0 alone and the others only once it listens, so the host is known (as
worker-0 is on Kubernetes). torch binds that store to every interface of the machine, which only a
node's own network namespace contains (``exposed_listeners``).
"""
from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from elastic_chaos.errors import PlatformError
from elastic_chaos.platforms.local.options import NetworkMode
from elastic_chaos.spec import JobSpec, RdzvBackend
from elastic_chaos.waiting import eventually


def wait_for_store(host: str, proc: subprocess.Popen[bytes], log_path: Path, addr: tuple[str, int],
                   netns: str | None, timeout_s: float) -> None:
    """Block until ``host``'s agent (``proc``) listens on ``addr`` (inside ``netns`` when the node has
    one); PlatformError when it exits first or does not within ``timeout_s``."""
    def listening() -> bool:
        if proc.poll() is not None:
            raise PlatformError(f"{host} exited before hosting the c10d store; see {log_path}")
        return port_open(addr, netns)

    if not eventually(listening, timeout_s=timeout_s, interval_s=0.2):
        raise PlatformError(f"{host} did not open the c10d store port {addr} within {timeout_s:.0f}s")


def port_open(addr: tuple[str, int], netns: str | None) -> bool:
    """Whether something accepts a TCP connection at ``addr``, from inside ``netns`` when given."""
    if netns is not None:
        probe = ["ip", "netns", "exec", netns, sys.executable, "-c",
                 f"import socket; socket.create_connection({addr!r}, timeout=1).close()"]
        return subprocess.run(probe, capture_output=True, timeout=30, check=False).returncode == 0
    try:
        socket.create_connection(addr, timeout=1).close()
        return True
    except OSError:
        return False


def exposed_listeners(job: JobSpec, mode: NetworkMode) -> list[str]:
    """The job's listeners that torch binds to every interface and nothing here can restrict,
    on host networking (in a node's namespace they reach only the private bridge)."""
    if mode is NetworkMode.ISOLATED or job.rdzv.backend is not RdzvBackend.C10D:
        return []
    return ["the c10d rendezvous store (in node-0's torchrun agent) listens on every interface of this "
            "machine: torch has no option to bind it. Run as root (network=auto puts c10d nodes in network "
            "namespaces) or use --rdzv-backend etcd-v2 to keep the job off other interfaces"]
