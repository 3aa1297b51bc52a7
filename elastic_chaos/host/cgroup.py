"""One cgroup v2 per local node: the whole node frozen or killed at once.

Every process a node starts is born into the node's cgroup (the agent is
moved there before it execs, and children inherit it), so the cgroup is the
node's exact process set, escaped sessions included. The kernel then does
what signals cannot do atomically: ``cgroup.freeze`` stops every process of
the node at once (a hung host), ``cgroup.kill`` kills them all, racing no
fork. Needs root and cgroup v2 (pure, or the hybrid ``unified`` mount);
without them the platform falls back to signalling tagged processes
(:mod:`elastic_chaos.host.procs`) and says so.
"""
from __future__ import annotations

import errno
import logging
import os
from functools import partial
from pathlib import Path

from elastic_chaos.waiting import eventually

log = logging.getLogger(__name__)

_CANDIDATE_ROOTS = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))
TOP = "elastic-chaos"
"""The local platform's parent cgroup (the local Kubernetes cluster keeps its own,
``elastic-chaos-cluster``)."""


def find_root() -> Path | None:
    """A writable cgroup v2 hierarchy offering cgroup.freeze and cgroup.kill, or None."""
    for root in _CANDIDATE_ROOTS:
        if not (root / "cgroup.procs").exists() or not (root / "cgroup.subtree_control").exists():
            continue  # not a v2 hierarchy
        probe = root / TOP / f"probe-{os.getpid()}"
        try:
            probe.mkdir(parents=True, exist_ok=True)
            ok = (probe / "cgroup.freeze").exists() and (probe / "cgroup.kill").exists()
            probe.rmdir()
        except OSError:
            continue
        if ok:
            return root / TOP
    return None


class NodeCgroups:
    """The cgroups of one run: ``<root>/elastic-chaos/<run_id>/<node>``."""

    def __init__(self, base: Path, run_id: str) -> None:
        self.dir = base / run_id
        self.dir.mkdir(parents=True, exist_ok=True)

    def path(self, node: str) -> Path:
        return self.dir / node

    def create(self, node: str) -> Path:
        path = self.path(node)
        path.mkdir(exist_ok=True)
        return path

    def wrap(self, node: str, cmd: list[str]) -> list[str]:
        """``cmd`` started inside the node's cgroup (the shell joins, then execs)."""
        procs = self.create(node) / "cgroup.procs"
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(procs), *cmd]

    def pids(self, node: str) -> set[int]:
        try:
            text = (self.path(node) / "cgroup.procs").read_text()
        except FileNotFoundError:
            return set()
        return {int(p) for p in text.split()}

    def freeze(self, node: str, timeout_s: float = 10.0) -> set[int]:
        """Freeze every process of the node; blocks until the kernel reports it frozen."""
        self._write(node, "cgroup.freeze", "1")
        self._wait_event(node, "frozen 1", timeout_s)
        return self.pids(node)

    def thaw(self, node: str, timeout_s: float = 10.0) -> set[int]:
        self._write(node, "cgroup.freeze", "0")
        self._wait_event(node, "frozen 0", timeout_s)
        return self.pids(node)

    def is_frozen(self, node: str) -> bool:
        try:
            return "frozen 1" in (self.path(node) / "cgroup.events").read_text()
        except FileNotFoundError:
            return False

    def kill(self, node: str, timeout_s: float = 10.0) -> set[int]:
        """SIGKILL every process of the node at once; blocks until none is left."""
        pids = self.pids(node)
        if not pids:
            return set()
        self._write(node, "cgroup.kill", "1")
        if not eventually(lambda: not self.pids(node), timeout_s=timeout_s, interval_s=0.01):
            raise TimeoutError(f"processes of {node} survived cgroup.kill: {sorted(self.pids(node))}")
        return pids

    @classmethod
    def of_run(cls, path: str, run_id: str) -> NodeCgroups | None:
        """The cgroups of run ``run_id`` at ``path`` (as a registry recorded it), or None when
        ``path`` is not such a folder under a cgroup v2 hierarchy's TOP (never touched then)."""
        p = Path(path)
        if ".." in p.parts or p.name != run_id or p.parent.name != TOP or \
                not any(p.parent.parent == root for root in _CANDIDATE_ROOTS) or not p.is_dir():
            return None
        return cls(p.parent, run_id)

    def nodes(self) -> list[str]:
        """Names of the node cgroups that exist now."""
        try:
            return sorted(c.name for c in self.dir.iterdir() if c.is_dir())
        except FileNotFoundError:
            return []

    def kill_all(self) -> set[int]:
        """Kill every process in every node cgroup of the run (thawed first); blocks until none
        is left. Idempotent."""
        hit: set[int] = set()
        for node in self.nodes():
            if self.is_frozen(node):
                self.thaw(node)
            hit |= self.kill(node)
        return hit

    def remove(self, timeout_s: float = 10.0) -> None:
        """Delete the run's cgroups. Blocks until each is empty, for up to ``timeout_s``: a
        killed process stays in its cgroup until its parent (often init, for an orphan)
        reaps it, and the kernel refuses to remove a cgroup until then. Idempotent; leaves a
        cgroup still populated after that in place (logged)."""
        if not self.dir.exists():
            return
        for path in [*(c for c in self.dir.iterdir() if c.is_dir()), self.dir]:
            if not eventually(partial(_try_remove, path), timeout_s=timeout_s, interval_s=0.05):
                log.warning("could not remove cgroup %s: still populated after %.0fs", path, timeout_s)

    def _write(self, node: str, name: str, value: str) -> None:
        (self.path(node) / name).write_text(value)

    def _wait_event(self, node: str, wanted: str, timeout_s: float) -> None:
        if not eventually(lambda: wanted in (self.path(node) / "cgroup.events").read_text(),
                          timeout_s=timeout_s, interval_s=0.01):
            raise TimeoutError(f"cgroup of {node} did not reach '{wanted}' in {timeout_s}s")


def _try_remove(path: Path) -> bool:
    """Remove the cgroup at ``path``; False while it is still populated (busy), True once it
    is gone or on any other error (logged: waiting would not help)."""
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            return False
        log.warning("could not remove cgroup %s: %s", path, exc)
    return True
