"""The embedded platform: a real etcd and real torchrun agents as nodes, on this machine.

A node is a ``torchrun`` agent plus every process it spawns. Each process
carries an environment tag (see :mod:`elastic_chaos.host.procs`); as root, a
node also lives in its own cgroup (:mod:`elastic_chaos.host.cgroup`), so it can
be frozen or killed by the kernel in one step, and optionally in its own
network namespace (:mod:`elastic_chaos.host.netns`), so a partition is a real
black hole. Each node has a metadata stand-in (:mod:`elastic_chaos.platforms.local.imds`)
where spot notices appear. A node's output goes to a fresh
``nodes/<name>.log``. The node pool plays the autoscaler: a node lost to a
fault is replaced after a provisioning delay.

Nothing outlives the runner: agents and etcd are started with the kernel's
death signal (:mod:`~elastic_chaos.host.lifeline`), and the run's guard
(:mod:`~elastic_chaos.platforms.local.guard`) registers the run, starts its watchdog,
reaps what killed runners left, and verifies at stop that nothing of the run
is alive.

What listens where: on host networking every node gets ``--local-addr
127.0.0.1`` (the workers' MASTER_ADDR, where the reference trainer binds its
store) and gloo/NCCL on ``lo``. torch binds the c10d rendezvous store (in the
first agent) and a static master store to every interface and offers no option
against it; so c10d nodes run in network namespaces by default when root
(``network=auto``), and elsewhere the platform says the store is exposed
(SECURITY.md).
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path, PurePosixPath

from elastic_chaos.errors import ChaosError, InjectionFailed, PlatformError, SetupError, SpecError
from elastic_chaos.events import NodeEv, RunnerEv, Timeline
from elastic_chaos.events.node_events import Exited, Provisioning, Started
from elastic_chaos.events.runner_events import EtcdStarted, GpuPlacement, Isolation
from elastic_chaos.host import lifeline, netns, procs
from elastic_chaos.host.cgroup import NodeCgroups, find_root
from elastic_chaos.host.etcd import EtcdServer, free_port
from elastic_chaos.platforms.api import CheckpointFolder, Hit, NodeInfo, NodePool, NodeState, Platform
from elastic_chaos.platforms.capabilities import Capability
from elastic_chaos.platforms.local import gpus
from elastic_chaos.platforms.local.agent import agent_command
from elastic_chaos.platforms.local.c10d_store import exposed_listeners, wait_for_store
from elastic_chaos.platforms.local.capabilities import local_capabilities
from elastic_chaos.platforms.local.disks import FOLDER, NodeDisks
from elastic_chaos.platforms.local.environment import node_environment
from elastic_chaos.platforms.local.guard import RunGuard
from elastic_chaos.platforms.local.hung import HungWorkers
from elastic_chaos.platforms.local.imds import MetadataStandIn
from elastic_chaos.platforms.local.node import LocalNode, Pending
from elastic_chaos.platforms.local.options import LocalOptions, NetworkMode
from elastic_chaos.platforms.local.relay import StallableRelay
from elastic_chaos.platforms.local.threads import announce, plan_threads, usable_cores
from elastic_chaos.platforms.local.torch_check import require_torch
from elastic_chaos.platforms.slowdown import Slowdowns
from elastic_chaos.platforms.storage import StorageLayer
from elastic_chaos.platforms.worker_logs import WorkerLog, WorkerLogFolder
from elastic_chaos.spec import JobSpec, RdzvBackend, locate_script

log = logging.getLogger(__name__)

__all__ = ["LocalOptions", "LocalPlatform", "NetworkMode"]


class LocalPlatform(Platform):
    name = "local"
    Options = LocalOptions

    def __init__(self, timeline: Timeline, work_dir: Path, options: LocalOptions | None = None) -> None:
        super().__init__(timeline, work_dir)
        self.options = options or LocalOptions()
        self.etcd: EtcdServer | None = None
        self.network: netns.NodeNetwork | None = None
        self.cgroups: NodeCgroups | None = None
        self._nodes: dict[str, LocalNode] = {}
        self._worker_folders: dict[str, WorkerLogFolder] = {}
        """Each node's agent's --log-dir: its workers' own output (elastic_chaos.platforms.worker_logs)."""
        self._pending: list[Pending] = []
        self._lock = threading.RLock()
        self._stop_pool = threading.Event()
        self._pool: threading.Thread | None = None
        self._pool_error: BaseException | None = None
        self._next_index = 0
        self._c10d_port = 0
        self._c10d_host = "127.0.0.1"
        self._workdir: Path | None = None
        self._script: tuple[str, ...] = ()
        self.guard: RunGuard | None = None
        self._gpus: gpus.Slots | None = None
        self.slowdowns = Slowdowns()
        self.hung = HungWorkers()
        self.disks: NodeDisks | None = None
        """Each node's own folder, lost with it (JobSpec.node_local_workdir)."""
        self.storage_layer: StorageLayer | None = None
        """The checkpoint folder's storage layer, when the job asks for one (elastic_chaos.platforms.storage)."""

    def node_pool(self) -> NodePool:
        return self.options

    # -- paths -------------------------------------------------------------
    @property
    def checkpoint_dir(self) -> Path:
        """The shared directory every node sees (the EFS/FSx volume of a cluster)."""
        return self.work_dir / "checkpoints"

    def checkpoint_folder(self) -> CheckpointFolder:
        """The nodes share this machine's folder: they name it as this process does."""
        return CheckpointFolder(self.checkpoint_dir, PurePosixPath(self.checkpoint_dir))

    @property
    def logs_dir(self) -> Path:
        return self.work_dir / "nodes"

    def node_workdirs(self) -> dict[str, Path] | None:
        return self.disks.live() if self.disks is not None else None

    def job_workdir(self) -> Path | None:
        """Where the nodes run (their current directory): the job's ``workdir``, by
        default ``workdir/`` in the report folder for a script, the report folder
        for the reference trainer."""
        return self._workdir

    def _prepare_workdir(self, job: JobSpec) -> Path:
        if job.workdir is not None:
            path = Path(job.workdir).expanduser().resolve()
        else:
            path = self.work_dir.resolve() / "workdir" if job.script else self.work_dir
        if path.exists() and not path.is_dir():
            raise SpecError(f"workdir {path} is a file; give a directory (it is created when missing)")
        path.mkdir(parents=True, exist_ok=True)
        return path

    # -- capabilities --------------------------------------------------------
    def _offers(self) -> tuple[Capability, ...]:
        return local_capabilities(self)

    def record(self, node: str) -> LocalNode | None:
        """The node's record (None: no such node)."""
        with self._lock:
            return self._nodes.get(node)

    def isolated(self) -> bool:
        """Whether the nodes run in network namespaces of their own."""
        return self.network_mode() is NetworkMode.ISOLATED

    def spawn_node(self) -> NodeInfo:
        """Start one more node of the running job (scale-up)."""
        assert self.job is not None
        return self._spawn(self.job)

    def network_mode(self, job: JobSpec | None = None) -> NetworkMode:
        """The network the nodes run on: the option, with ``auto`` resolved for ``job`` (by
        default the running one; before a job, auto is host)."""
        mode = self.options.network
        if mode is not NetworkMode.AUTO:
            return mode
        job = job or self.job
        if job is not None and job.rdzv.backend is RdzvBackend.C10D and netns.unavailable_reason() is None:
            return NetworkMode.ISOLATED
        return NetworkMode.HOST

    def interface_env(self, job: JobSpec) -> dict[str, str]:
        """gloo's and NCCL's interface: the node's own (loopback on host networking), so the
        job's traffic and listeners stay there; a value the job's ``env`` sets wins."""
        iface = "eth0" if self.network is not None else "lo"
        return {k: iface for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if k not in dict(job.env)}

    def store_host(self) -> str | None:
        if self.job is None or self.job.rdzv.backend is not RdzvBackend.C10D:
            return None
        return next(iter(self._nodes), None)  # the first node binds the store port

    # -- lifecycle -------------------------------------------------------
    def _start(self, job: JobSpec) -> None:
        require_torch(self.options.python)  # torch is not a dependency: say how to install it, not fail every node
        self._gpus = self._place_on_gpus(job)  # refused before anything starts
        # a relative script path means relative to here; the nodes run in the workdir
        self._script = locate_script(job.script) if job.script else ()
        self._workdir = self._prepare_workdir(job)
        self.disks = NodeDisks(self.work_dir / FOLDER, self.timeline) if job.node_local_workdir else None
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        self.guard = RunGuard(self.timeline, self.work_dir, job.run_id, self.options.state_dir)
        self.guard.open()  # before anything starts: a run that dies from here on is reaped
        # before the first node: a node copies the mount table as it starts (its network namespace)
        self.storage_layer = StorageLayer.for_job(job, self.checkpoint_dir, self.work_dir / "storage",
                                                  ledger=self.guard)
        self._setup_isolation(job)
        announce(self.timeline, plan_threads(usable_cores(), job.max_nodes, job.nproc_per_node,
                                             {**os.environ, **job.node_env()}))  # what _spawn sets, said once
        if job.rdzv.backend.needs_etcd():
            self.etcd = EtcdServer(self.work_dir / "etcd-data", binary=_opt_path(self.options.etcd_binary),
                                   log_path=self.work_dir / "etcd.log", env={procs.TAG_VAR: f"{job.run_id}/etcd"})
            self.etcd.start()
            self.guard.etcd_started(self.etcd.pid)
            self.timeline.emit(RunnerEv.ETCD_STARTED, None, EtcdStarted(
                endpoint=self.etcd.endpoint, pid=self.etcd.pid, version=".".join(map(str, self.etcd.version or ()))))
        else:
            self._c10d_port = free_port()
        first = self._spawn(job)
        if not job.rdzv.backend.needs_etcd():
            self._wait_for_store(first.name)
        for _ in range(job.initial_nodes - 1):
            self._spawn(job)
        self._stop_pool.clear()
        self._pool = threading.Thread(target=self._run_pool, name="node-pool", daemon=True)
        self._pool.start()

    def _setup_isolation(self, job: JobSpec) -> None:
        assert self.guard is not None
        mode = self.network_mode(job)
        if mode is NetworkMode.ISOLATED:
            self.network = netns.NodeNetwork(job.run_id)
            self.guard.network(links=(self.network.bridge,))
            self.network.setup()
        use = self.options.use_cgroups
        root = find_root() if use is not False else None
        if use and root is None:
            raise SetupError("use_cgroups=True but no writable cgroup v2 hierarchy with cgroup.freeze/"
                             "cgroup.kill was found (needs root and cgroup v2)")
        if root is not None:
            self.cgroups = NodeCgroups(root, job.run_id)
            self.guard.cgroups(self.cgroups.dir)
        exposed = exposed_listeners(job, mode)
        for what in exposed:
            log.warning("%s", what)
        self.timeline.emit(RunnerEv.ISOLATION, None, Isolation(
            network=mode.value, cgroups=str(self.cgroups.dir) if self.cgroups else None, exposed=tuple(exposed)))

    def _place_on_gpus(self, job: JobSpec) -> gpus.Slots:
        ids = self.options.gpus if self.options.gpus is not None else gpus.detect().ids
        placement = gpus.plan(ids, slots=job.max_nodes, nproc_per_node=job.nproc_per_node, backend=job.backend,
                              share=self.options.share_gpus, isolated=self.network_mode(job) is NetworkMode.ISOLATED,
                              strict=not job.script)
        if ids or placement.mode is not gpus.GpuMode.NONE:
            self.timeline.emit(RunnerEv.GPU_PLACEMENT, None, GpuPlacement.read(
                {**placement.to_json(), "gpus": list(ids)}))
        return gpus.Slots(placement, job.run_id)

    def _wait_for_store(self, host: str, timeout_s: float = 120.0) -> None:
        # c10d: whichever agent binds the port first hosts the store. Starting the
        # others only once node-0 listens makes the host known (as worker-0 on k8s).
        node = self._nodes[host]
        netns = self.network.nodes[host].netns if self.network is not None else None
        wait_for_store(host, node.proc, node.log_path, (node.address, self._c10d_port), netns, timeout_s)

    def _stop(self) -> None:
        # every step is tried whatever the others did; what failed is said at the end
        errors: list[str] = self.slowdowns.restore_all()  # nothing left stopped by a duty cycle
        self._stop_pool.set()
        if self._pool is not None:
            self._pool.join(10)
        with self._lock:
            self._pending.clear()
            for node in self._nodes.values():
                if node.info.state.is_alive():
                    node.info = replace(node.info, state=NodeState.STOPPED)
                _attempt(errors, f"stopping {node.info.name}", partial(self._stop_node, node))
        if self.etcd is not None:
            _attempt(errors, "stopping etcd", self.etcd.stop)
            self.etcd = None
        guard, self.guard = self.guard, None
        if guard is not None:
            _attempt(errors, "sweeping the run's processes", guard.sweep)
        if self.storage_layer is not None:   # after the nodes: nothing of the job writes through it any more
            _attempt(errors, "unmounting the storage layer", self.storage_layer.unmount)
        if self.network is not None:
            _attempt(errors, "removing the node network", self.network.teardown)
        if self.cgroups is not None:
            _attempt(errors, "removing the cgroups", self.cgroups.remove)
        if guard is not None:
            _attempt(errors, "checking that nothing of the run is left", guard.close)
        if self._pool_error is not None:
            errors.append(f"node pool failed: {self._pool_error}")
        if errors:
            raise PlatformError("; ".join(errors))

    def _stop_node(self, node: LocalNode) -> None:
        try:
            self._kill_processes(node)
            _reap(node.proc)
        finally:
            node.imds.close()
            if node.relay is not None:
                node.relay.close()

    # -- nodes -------------------------------------------------------------
    def nodes(self) -> list[NodeInfo]:
        with self._lock:
            return [n.info for n in self._nodes.values()]

    def node_logs(self) -> dict[str, Path]:
        with self._lock:
            return {name: n.log_path for name, n in self._nodes.items()}

    def worker_logs(self) -> dict[str, list[WorkerLog]]:
        """Each node's workers' own files under its agent's ``--log-dir`` (``nodes/<node>.torchelastic``)."""
        with self._lock:
            folders = dict(self._worker_folders)
        return {name: folder.files() for name, folder in folders.items()}

    def replacement_pending(self) -> bool:
        with self._lock:
            return bool(self._pending)

    def node_tag(self, node: str) -> str:
        return self._nodes[node].tag

    def node_pids(self, node: str) -> set[int]:
        """Every live process of ``node`` (cgroup members, or tagged processes)."""
        rec = self._nodes[node]
        pids = procs.tagged_pids(rec.tag)
        if self.cgroups is not None:
            pids |= self.cgroups.pids(node)
        return pids

    def metadata(self, node: str) -> MetadataStandIn:
        return self._nodes[node].imds

    def etcd_endpoint(self) -> str | None:
        return self.etcd.endpoint if self.etcd else None

    def rdzv_endpoint(self, job: JobSpec) -> str:
        if job.rdzv.backend is RdzvBackend.ETCD_V2:
            assert self.etcd is not None
            return self.etcd.endpoint  # in a namespace, the relay listens on the same address
        return f"{self._c10d_host}:{self._c10d_port}"

    def _spawn(self, job: JobSpec, *, replaces: str | None = None) -> NodeInfo:
        with self._lock:
            name = f"node-{self._next_index}"
            self._next_index += 1
            tag = f"{job.run_id}/{name}"
            log_path = self.logs_dir / f"{name}.log"
            rec_address, relay, imds = self._node_network(name)
            store_host = not self._nodes
            if store_host:
                self._c10d_host = rec_address  # the first node hosts a c10d store
            gpus_env = {}
            if self._gpus is not None:  # a node's own GPUs (CUDA_VISIBLE_DEVICES, NCCL_HOSTID)
                alive = {n for n, r in self._nodes.items() if r.info.state.is_alive()}
                gpus_env = self._gpus.assign(name, alive)
            env = node_environment(job, name, tag, gpus=gpus_env, checkpoint_dir=self.checkpoint_dir,
                                   metadata_endpoint=imds.endpoint, interface=self.interface_env(job),
                                   script=self._script is not None)
            shared = self._workdir or self.work_dir
            if self.disks is not None:  # the node works on a disk of its own
                env.update(self.disks.env(name, shared))
            cwd = self.disks.create(name) if self.disks is not None else shared
            cmd = agent_command(job, python=self.options.python, endpoint=self.rdzv_endpoint(job), address=rec_address,
                                store_host=store_host, script=self._script, checkpoint_dir=self.checkpoint_dir,
                                log_dir=self.logs_dir / f"{name}.torchelastic")
            self._worker_folders[name] = WorkerLogFolder(self.logs_dir / f"{name}.torchelastic")
            if self.network is not None:
                cmd = self.network.wrap(name, cmd)
            if self.cgroups is not None:  # outermost: `ip netns exec` remounts /sys without the cgroups
                cmd = self.cgroups.wrap(name, cmd)
            # a fresh log per node (names are never reused in a run); the agent dies with the runner
            with open(log_path, "wb") as logf:
                proc = lifeline.popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      env=env, cwd=cwd, start_new_session=True)
            info = NodeInfo(name=name, state=NodeState.RUNNING, started_at=time.time(),
                            agent_pid=proc.pid, replaces=replaces,
                            labels={"address": rec_address})
            self._nodes[name] = LocalNode(info=info, proc=proc, tag=tag, log_path=log_path, imds=imds,
                                      relay=relay, address=rec_address)
        self.timeline.emit(NodeEv.STARTED, name, Started(
            agent_pid=proc.pid, replaces=replaces, address=rec_address), t=info.started_at)
        return info

    def _node_network(self, name: str) -> tuple[str, StallableRelay | None, MetadataStandIn]:
        if self.network is None:
            return "127.0.0.1", None, MetadataStandIn(name).start()
        assert self.guard is not None
        planned = self.network.plan(name)  # recorded before it exists: a runner killed now leaves nothing unknown
        self.guard.network(netns=planned.netns, links=(planned.host_veth,))
        net = self.network.add_node(name)
        imds = MetadataStandIn(name, listener=self.network.listen_in(name)).start()
        relay = None
        if self.etcd is not None:
            etcd = self.etcd
            relay = StallableRelay(self.network.listen_in(name, int(etcd.client_port or 0)),
                                   lambda: ("127.0.0.1", int(etcd.client_port or 0)), name).start()
        return net.address, relay, imds

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
                        self.timeline.emit(NodeEv.EXITED, node.info.name, Exited(exit_code=code))

    def _provision_due(self) -> None:
        now = time.time()
        with self._lock:
            due = [p for p in self._pending if p.due <= now]
            self._pending = [p for p in self._pending if p.due > now]
        for p in due:
            if self.job is not None and len(self.alive_nodes()) < self.job.max_nodes:
                self._spawn(self.job, replaces=p.replaces)

    # -- faults ------------------------------------------------------------
    def _kill_processes(self, rec: LocalNode) -> set[int]:
        hit: set[int] = set()
        try:
            self.slowdowns.restore(rec.info.name)  # a duty cycle must not race the kill
        except PlatformError as exc:
            log.warning("%s", exc)
        if self.cgroups is not None:
            if self.cgroups.is_frozen(rec.info.name):
                self.cgroups.thaw(rec.info.name)
            hit |= self.cgroups.kill(rec.info.name)
        hit |= procs.kill_tree(rec.tag, first=rec.proc.pid if rec.proc.poll() is None else None)
        return hit

    def _kill_node(self, node: str, *, graceful: bool, grace_s: float) -> Hit:
        with self._lock:
            rec = self._nodes[node]
            rec.fault_pending = True
        at = time.time()
        if graceful:
            hit = self._terminate(rec, grace_s)
        else:
            pids = self._kill_processes(rec)
            how = "cgroup.kill" if self.cgroups is not None else "sigstop-then-sigkill"
            hit = Hit(node=node, at=at, action="sigkill-all", pids=tuple(sorted(pids)), detail={"how": how})
        _reap(rec.proc)
        if rec.relay is not None:
            rec.relay.close()  # the node's sockets are gone with it
        if self.disks is not None:
            self.disks.lose(node)  # and its own disk
        with self._lock:
            rec.info = replace(rec.info, state=NodeState.LOST, exit_code=rec.proc.returncode)
            rec.fault_pending = False
            if self.options.replace_lost_nodes:
                delay = self.options.provisioning_delay_s or 0.0
                self._pending.append(Pending(due=time.time() + delay, replaces=node))
                self.timeline.emit(NodeEv.PROVISIONING, None, Provisioning(replaces=node, delay_s=delay))
        return hit

    def _terminate(self, rec: LocalNode, grace_s: float) -> Hit:
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
        leftover = self._kill_processes(rec)
        return Hit(node=rec.info.name, at=at, action=action, pids=tuple(sorted(leftover)),
                   detail={"grace_s": grace_s, "exited_within_grace_s": round(time.time() - at, 3)
                           if action == "sigterm" else None})


def _attempt(errors: list[str], what: str, step: Callable[[], object]) -> None:
    try:
        step()
    except (ChaosError, OSError, TimeoutError, subprocess.SubprocessError) as exc:
        log.exception("%s failed", what)
        errors.append(f"{what}: {exc}")


def _reap(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        log.warning("agent %s did not exit after SIGKILL", proc.pid)


def _opt_path(value: str | None) -> Path | None:
    return Path(value) if value else None
