"""The platform contract: run one elastic job on nodes, and hurt those nodes.

Modelled on torchx's Scheduler: the public methods live here and do the
bookkeeping every backend needs (state checks, timeline events, fault
records); backends fill in the small ``_hooks``. A platform runs at most one
job at a time; ``stop()`` is idempotent.
"""
from __future__ import annotations

import abc
import enum
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.errors import InjectionFailed, PlatformError
from chaos.events import Timeline
from chaos.spec import JobSpec


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


class Platform(abc.ABC):
    """Runs one elastic job; faults are methods returning what they hit."""

    name: str = "abstract"

    def __init__(self, timeline: Timeline, work_dir: Path) -> None:
        self.timeline = timeline
        self.work_dir = work_dir
        self.job: JobSpec | None = None

    # -- lifecycle -------------------------------------------------------
    def start(self, job: JobSpec) -> None:
        """Start ``job``; blocks until every node's agent process is started."""
        if self.job is not None:
            raise PlatformError(f"{self.name} platform already runs job {self.job.run_id}; stop it first")
        self.job = job
        self.timeline.emit("runner", "job_started", run_id=job.run_id, platform=self.name,
                           spec=job.to_json())
        self._start(job)

    def stop(self) -> None:
        """Stop the job and everything it started. Idempotent; never raises for a gone job."""
        if self.job is None:
            return
        try:
            self._stop()
        finally:
            self.timeline.emit("runner", "job_stopped", run_id=self.job.run_id)
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

    def alive_nodes(self) -> list[NodeInfo]:
        return [n for n in self.nodes() if n.state.is_alive()]

    # -- faults ----------------------------------------------------------
    def kill_node(self, node: str, *, graceful: bool = False, grace_s: float = 30.0) -> Hit:
        """Take ``node`` away: hard (every process SIGKILLed at once) or graceful
        (SIGTERM to the agent, SIGKILL of what is left after ``grace_s``).

        Blocks until the node is gone. Raises InjectionFailed if it is not alive.
        """
        self._require_node(node)
        hit = self._kill_node(node, graceful=graceful, grace_s=grace_s)
        self.timeline.emit("node", "lost", node, t=hit.at, action=hit.action, pids=list(hit.pids))
        return hit

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
