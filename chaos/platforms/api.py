"""The platform contract: run one elastic job on nodes, and hurt those nodes.

Modelled on torchx's Scheduler: the public methods live here and do the
bookkeeping every backend needs (state checks, timeline events, fault
records); backends fill in the small ``_hooks``. A platform runs at most one
job at a time; ``stop()`` is idempotent.
"""
from __future__ import annotations

import abc
import datetime
import enum
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from chaos.errors import FaultUnavailable, InjectionFailed, PlatformError
from chaos.events import NodeEv, RunnerEv, Timeline
from chaos.events.node_events import Acted, Lost, Notice, Restored, Slowed, WorkerActed
from chaos.events.runner_events import JobStarted, JobStopped, StoreStopped
from chaos.options import option
from chaos.spec import JobSpec


class Capability(enum.Enum):
    """What a platform may or may not be able to do to a job, here and now."""

    NOTICE = "spot notice"
    PARTITION = "network partition"
    FREEZE = "node freeze"
    WORKER_CRASH = "worker crash"
    SCALE_UP = "scale-up"
    STORE_OUTAGE = "rendezvous store outage"
    STORE_HOST = "a c10d rendezvous store hosted by a node"
    SLOW_DOWN = "slowing a node down"
    HANG_WORKER = "hanging one worker"


class StoreOutage(str, enum.Enum):
    CRASH = "crash"
    """The store process is killed: clients get connection refused at once."""
    HANG = "hang"
    """The store process is stopped: connections are accepted and never answered."""


class NodeState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    LOST = "lost"          # taken away by a fault
    EXITED = "exited"      # its agent ended on its own (job done or failed)
    STOPPED = "stopped"    # stopped by the platform at the end of a run

    def is_alive(self) -> bool:
        return self in (NodeState.STARTING, NodeState.RUNNING)


@dataclass(frozen=True)
class NodeInfo:
    name: str
    state: NodeState
    started_at: float
    agent_pid: int | None = None
    replaces: str | None = None
    exit_code: int | None = None
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Hit:
    """What a fault actually touched: the platform's side of a fault record."""

    node: str
    at: float
    action: str
    pids: tuple[int, ...] = ()
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NodePool:
    """How lost nodes come back: the cluster-autoscaler's part, which every platform that
    provisions its own nodes plays (its options dataclass extends this one)."""

    replace_lost_nodes: bool = option(True, "replace a node lost to a fault after the provisioning delay, "
                                            "as the cluster-autoscaler does", flag="--replace",
                                      off_flag="--no-replace")
    provisioning_delay_s: float | None = option(5.0, "seconds from a node's loss to its replacement "
                                                     "starting (the autoscaler's minutes, scaled down)",
                                                flag="--provisioning-delay", minimum=0, units="s")


class Platform(abc.ABC):
    """Runs one elastic job; faults are methods returning what they hit.

    A backend declares its options as a dataclass (``Options``; fields made with
    chaos.options.option carry their help, flag and bounds), so the CLI's
    ``run --platform NAME`` and the pytest fixture offer them without restating them.
    """

    name: str = "abstract"
    Options: ClassVar[type] = NodePool

    @classmethod
    def option_classes(cls) -> tuple[type, ...]:
        """The dataclasses whose fields are this platform's options."""
        return (cls.Options,)

    @classmethod
    def make_options(cls, values: dict[str, Any]) -> Any:
        """This platform's options object from option values by name (SpecError for a bad one)."""
        return cls.Options(**values)

    def node_pool(self) -> NodePool | None:
        """How this platform replaces lost nodes (None: it does not, or not under our control)."""
        return None

    def __init__(self, timeline: Timeline, work_dir: Path) -> None:
        self.timeline = timeline
        self.work_dir = work_dir.resolve()
        self.job: JobSpec | None = None

    # -- lifecycle -------------------------------------------------------
    def start(self, job: JobSpec) -> None:
        """Start ``job``; blocks until every node's agent process is started."""
        if self.job is not None:
            raise PlatformError(f"{self.name} platform already runs job {self.job.run_id}; stop it first")
        self.job = job
        self.timeline.emit(RunnerEv.JOB_STARTED, None, JobStarted(run_id=job.run_id, platform=self.name,
                                                                  spec=job.to_json()))
        self._start(job)

    def stop(self) -> None:
        """Stop the job and everything it started. Idempotent; never raises for a gone job."""
        if self.job is None:
            return
        try:
            self._stop()
        finally:
            self.timeline.emit(RunnerEv.JOB_STOPPED, None, JobStopped(run_id=self.job.run_id))
            self.job = None

    def __enter__(self) -> Platform:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _require_node(self, node: str) -> NodeInfo:
        for info in self.nodes():
            if info.name == node:
                if not info.state.is_alive():
                    raise InjectionFailed(f"node {node} is {info.state.value}; nothing to hit")
                return info
        raise InjectionFailed(f"no node named {node}; nodes: {[n.name for n in self.nodes()]}")

    def replacement_pending(self) -> bool:
        """Whether a lost node's replacement is on its way (the job is not dead yet)."""
        return False

    @classmethod
    def node_log_timezone(cls) -> datetime.tzinfo | None:
        """The time zone the nodes' agents write their log times in (torch's glog lines carry no
        zone); None: this machine's local time (nodes that are processes here)."""
        return None

    def job_workdir(self) -> Path | None:
        """The job's shared working directory as a path on this machine (where a
        script's checkpoint file can be watched), or None where it is not local."""
        return None

    def alive_nodes(self) -> list[NodeInfo]:
        return [n for n in self.nodes() if n.state.is_alive()]

    def unavailable(self, capability: Capability) -> str | None:
        """Why this platform cannot do ``capability`` here, or None when it can.

        Scenarios skip with this reason; faults refuse with it. Never silently
        substitutes another fault.
        """
        return f"{capability.value} is not supported on the {self.name} platform"

    def store_host(self) -> str | None:
        """The node hosting the rendezvous store (c10d), or None when the store is
        not a node (etcd)."""
        return None

    def _require(self, capability: Capability) -> None:
        reason = self.unavailable(capability)
        if reason is not None:
            raise FaultUnavailable(reason)

    # -- faults ----------------------------------------------------------
    def kill_node(self, node: str, *, graceful: bool = False, grace_s: float = 30.0) -> Hit:
        """Take ``node`` away: hard (every process SIGKILLed at once) or graceful
        (SIGTERM to the agent, SIGKILL of what is left after ``grace_s``).

        Blocks until the node is gone. Raises InjectionFailed if it is not alive.
        """
        self._require_node(node)
        hit = self._kill_node(node, graceful=graceful, grace_s=grace_s)
        self.timeline.emit(NodeEv.LOST, node, Lost.read({**hit.detail, "action": hit.action, "pids": hit.pids}),
                           t=hit.at)
        return hit

    def kill_plan(self, node: str, *, graceful: bool = False) -> tuple[str, ...]:
        """What ``kill_node`` does to ``node`` on this platform, in words (a fault's dry run)."""
        if graceful:
            return (f"SIGTERM the agent of {node}", f"SIGKILL what is left of {node} after the grace period")
        return (f"SIGSTOP every process of {node}", f"SIGKILL every process of {node}")

    def send_notice(self, node: str, kind: str, *, terminate_at: float) -> Hit:
        """Publish a spot notice the node can observe (``rebalance`` or ``interruption``)."""
        self._require(Capability.NOTICE)
        self._require_node(node)
        hit = self._send_notice(node, kind, terminate_at=terminate_at)
        self.timeline.emit(NodeEv.NOTICE, node, Notice(notice=kind, terminate_at=terminate_at), t=hit.at)
        return hit

    def partition_node(self, node: str) -> Hit:
        """Black-hole every packet to and from ``node``; its processes keep running."""
        self._require(Capability.PARTITION)
        self._require_node(node)
        hit = self._partition_node(node)
        self.timeline.emit(NodeEv.PARTITIONED, node, t=hit.at)
        return hit

    def heal_node(self, node: str) -> Hit:
        """Undo ``partition_node``. Idempotent; a gone node is nothing to heal."""
        hit = self._heal_node(node)
        self.timeline.emit(NodeEv.HEALED, node, t=hit.at)
        return hit

    def freeze_node(self, node: str) -> Hit:
        """Stop every process of ``node`` at once (a hung host); sockets stay open."""
        self._require(Capability.FREEZE)
        self._require_node(node)
        hit = self._freeze_node(node)
        self.timeline.emit(NodeEv.FROZEN, node, Acted(action=hit.action, pids=hit.pids), t=hit.at)
        return hit

    def thaw_node(self, node: str) -> Hit:
        """Undo ``freeze_node``. Idempotent."""
        hit = self._thaw_node(node)
        self.timeline.emit(NodeEv.THAWED, node, t=hit.at)
        return hit

    def kill_worker(self, node: str, *, local_rank: int = 0) -> Hit:
        """SIGKILL one worker process of ``node``; the node and its agent stay."""
        self._require(Capability.WORKER_CRASH)
        self._require_node(node)
        hit = self._kill_worker(node, local_rank=local_rank)
        self.timeline.emit(NodeEv.WORKER_KILLED, node, WorkerActed(pids=hit.pids, local_rank=local_rank), t=hit.at)
        return hit

    def add_node(self) -> NodeInfo:
        """Start one more node of the running job (scale-up). Blocks until its agent starts."""
        self._require(Capability.SCALE_UP)
        if self.job is None:
            raise PlatformError("no job is running")
        return self._add_node()

    def stop_store(self, *, how: StoreOutage = StoreOutage.CRASH) -> Hit:
        """Take the rendezvous store (etcd) away: crashed (connections refused) or hung
        (connections accepted, never answered). Its data stays."""
        self._require(Capability.STORE_OUTAGE)
        hit = self._stop_store(how=how)
        self.timeline.emit(RunnerEv.STORE_STOPPED, None, StoreStopped(action=hit.action, how=how.value), t=hit.at)
        return hit

    def start_store(self) -> Hit:
        """Bring the rendezvous store back with its data (restart, or resume a hung one);
        blocks until it serves. Idempotent."""
        hit = self._start_store()
        self.timeline.emit(RunnerEv.STORE_STARTED, t=hit.at)
        return hit

    def slow_node(self, node: str, *, factor: float, period_s: float) -> Hit:
        """Run ``node`` at 1/``factor`` of its speed until ``restore_speed``: every process of
        the node runs only 1/factor of each ``period_s`` and is stopped for the rest. Returns
        at once (the slowing goes on in the background)."""
        self._require(Capability.SLOW_DOWN)
        self._require_node(node)
        hit = self._slow_node(node, factor=factor, period_s=period_s)
        self.timeline.emit(NodeEv.SLOWED, node, Slowed.read({**hit.detail, "action": hit.action, "factor": factor,
                                                             "period_s": period_s}), t=hit.at)
        return hit

    def restore_speed(self, node: str) -> Hit:
        """Undo ``slow_node`` (the node runs at full speed, nothing of it left stopped).
        Idempotent; a gone node is nothing to restore."""
        hit = self._restore_speed(node)
        self.timeline.emit(NodeEv.RESTORED, node, Restored.read({**hit.detail, "action": hit.action}), t=hit.at)
        return hit

    def hang_worker(self, node: str, *, local_rank: int = 0) -> Hit:
        """Stop one worker process of ``node`` where it is (SIGSTOP): alive, its node and agent
        alive, its peers blocked in their next collective. ``hit.pids`` is the worker."""
        self._require(Capability.HANG_WORKER)
        self._require_node(node)
        hit = self._hang_worker(node, local_rank=local_rank)
        self.timeline.emit(NodeEv.WORKER_HUNG, node, WorkerActed(pids=hit.pids, local_rank=local_rank), t=hit.at)
        return hit

    def resume_worker(self, node: str, pid: int) -> Hit:
        """Undo ``hang_worker`` for the worker ``pid`` (SIGCONT) if it is still that process.
        Idempotent; a worker its agent has killed meanwhile is nothing to resume."""
        hit = self._resume_worker(node, pid)
        self.timeline.emit(NodeEv.WORKER_RESUMED, node, Acted(action=hit.action, pids=hit.pids), t=hit.at)
        return hit

    # optional hooks: a backend overrides those it supports and says so in unavailable()
    def _slow_node(self, node: str, *, factor: float, period_s: float) -> Hit:
        raise FaultUnavailable(f"slowing a node down is not supported on the {self.name} platform")

    def _restore_speed(self, node: str) -> Hit:
        return Hit(node=node, at=now(), action="nothing-to-restore")

    def _hang_worker(self, node: str, *, local_rank: int) -> Hit:
        raise FaultUnavailable(f"hanging one worker is not supported on the {self.name} platform")

    def _resume_worker(self, node: str, pid: int) -> Hit:
        return Hit(node=node, at=now(), action="nothing-to-resume")

    def _send_notice(self, node: str, kind: str, *, terminate_at: float) -> Hit:
        raise FaultUnavailable(f"spot notices are not supported on the {self.name} platform")

    def _partition_node(self, node: str) -> Hit:
        raise FaultUnavailable(f"partitions are not supported on the {self.name} platform")

    def _heal_node(self, node: str) -> Hit:
        return Hit(node=node, at=now(), action="nothing-to-heal")

    def _freeze_node(self, node: str) -> Hit:
        raise FaultUnavailable(f"freezing a node is not supported on the {self.name} platform")

    def _thaw_node(self, node: str) -> Hit:
        return Hit(node=node, at=now(), action="nothing-to-thaw")

    def _kill_worker(self, node: str, *, local_rank: int) -> Hit:
        raise FaultUnavailable(f"killing one worker is not supported on the {self.name} platform")

    def _add_node(self) -> NodeInfo:
        raise FaultUnavailable(f"adding a node is not supported on the {self.name} platform")

    def _stop_store(self, *, how: StoreOutage) -> Hit:
        raise FaultUnavailable(f"stopping the store is not supported on the {self.name} platform")

    def _start_store(self) -> Hit:
        raise FaultUnavailable(f"starting the store is not supported on the {self.name} platform")

    # -- hooks -----------------------------------------------------------
    @abc.abstractmethod
    def _start(self, job: JobSpec) -> None: ...

    @abc.abstractmethod
    def _stop(self) -> None: ...

    @abc.abstractmethod
    def nodes(self) -> list[NodeInfo]:
        """Every node the job has had, alive or not, in start order."""

    @abc.abstractmethod
    def node_logs(self) -> dict[str, Path]:
        """Node name -> the file that node's output is appended to."""

    @abc.abstractmethod
    def etcd_endpoint(self) -> str | None:
        """host:port of the job's etcd (None for c10d)."""

    @abc.abstractmethod
    def _kill_node(self, node: str, *, graceful: bool, grace_s: float) -> Hit: ...


def now() -> float:
    return time.time()
