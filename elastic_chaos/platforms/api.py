"""The platform contract: run one elastic job on nodes, lose a node, and offer capabilities.

Modelled on torchx's Scheduler: a small base whose public methods do the
bookkeeping every backend needs (state checks, timeline events); backends fill in
the small ``_hooks``. Everything a platform can do besides running the job and
losing a node is a capability (elastic_chaos.platforms.capabilities) a backend offers
(``_offers``); what it lacks is derived (``lacks``). A platform runs at most one
job at a time; ``stop()`` is idempotent.
"""
from __future__ import annotations

import abc
import datetime
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, TypeVar

from elastic_chaos.errors import FaultUnavailable, InjectionFailed, PlatformError
from elastic_chaos.events import NodeEv, RunnerEv, Timeline
from elastic_chaos.events.node_events import Lost
from elastic_chaos.events.runner_events import JobStarted, JobStopped
from elastic_chaos.options import DAY_S, option
from elastic_chaos.platforms.capabilities import Capability, kind_of
from elastic_chaos.platforms.nodes import Hit, NodeInfo, NodeState, now
from elastic_chaos.platforms.worker_logs import WorkerLog
from elastic_chaos.spec import JobSpec

__all__ = ["Hit", "NodeInfo", "NodePool", "NodeState", "Platform", "now"]

C = TypeVar("C", bound=Capability)


@dataclass(frozen=True)
class NodePool:
    """How lost nodes come back: the cluster-autoscaler's part, which every platform that
    provisions its own nodes plays (its options dataclass extends this one)."""

    replace_lost_nodes: bool = option(True, "replace a node lost to a fault after the provisioning delay, "
                                            "as the cluster-autoscaler does", flag="--replace",
                                      off_flag="--no-replace")
    provisioning_delay_s: float | None = option(5.0, "seconds from a node's loss to its replacement "
                                                     "starting (the autoscaler's minutes, scaled down)",
                                                flag="--provisioning-delay", minimum=0, units="s", maximum=DAY_S)


@dataclass(frozen=True)
class CheckpointFolder:
    """The job's checkpoint folder as this machine reads it (``here``) and as the job's own processes
    name it (``seen_as``: the paths its checkpoint events carry): a fault that edits a save on the volume
    maps a save the job reported to the file it edits."""

    here: Path
    seen_as: PurePosixPath

    def local(self, path: str) -> Path | None:
        """``path`` as the job named it, on this machine; None for a path outside the folder."""
        try:
            return self.here / PurePosixPath(path).relative_to(self.seen_as)
        except ValueError:
            pass
        try:   # the job named it through a link (a /tmp that is a symlink): compare resolved paths
            return self.here / Path(path).resolve().relative_to(self.here.resolve())
        except ValueError:
            return None


class Platform(abc.ABC):
    """Runs one elastic job; faults are methods returning what they hit.

    A backend declares its options as a dataclass (``Options``; fields made with
    elastic_chaos.options.option carry their help, flag and bounds), so the CLI's
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

    def checkpoint_folder(self) -> CheckpointFolder | None:
        """The running job's checkpoint folder where this machine can read and edit it, with the path the
        job's processes know it by (None: the platform keeps it elsewhere, or no job is running)."""
        return None

    def __init__(self, timeline: Timeline, work_dir: Path) -> None:
        self.timeline = timeline
        self.work_dir = work_dir.resolve()
        self.job: JobSpec | None = None
        self._capabilities: dict[type[Capability], Capability] | None = None

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

    def node_workdirs(self) -> dict[str, Path] | None:
        """Each live node's own working directory on this machine, when the job gives nodes
        folders of their own (JobSpec.node_local_workdir; a lost node's is gone with it);
        None where the nodes share ``job_workdir()`` or their own folders are not on this
        machine (a pod's emptyDir)."""
        return None

    def worker_logs(self) -> dict[str, list[WorkerLog]] | None:
        """Each node's workers' own output files on this machine, as they appear (one per
        stream, attempt and local rank: elastic_chaos.platforms.worker_logs), read instead of their
        copies in the node logs (a platform that offers them does for every node); None where
        only the node logs are readable (a pod's log: the workers' lines are the prefixed copies
        in it). Lists folders; never raises."""
        return None

    def alive_nodes(self) -> list[NodeInfo]:
        return [n for n in self.nodes() if n.state.is_alive()]

    # -- capabilities ------------------------------------------------------
    def _offers(self) -> Iterable[Capability]:
        """The capabilities this platform has, each its implementation (elastic_chaos.platforms.capabilities).
        What is not offered is not supported; a backend overrides this, nothing else."""
        return ()

    def _offered(self) -> dict[type[Capability], Capability]:
        if self._capabilities is None:
            self._capabilities = {}
            for impl in self._offers():
                self._capabilities[kind_of(impl)] = impl
        return self._capabilities

    def lacks(self, kind: type[Capability]) -> str | None:
        """Why this platform cannot do ``kind`` here and now, or None when it can. Scenarios
        skip with this reason; faults refuse with it. Never silently substitutes another fault."""
        impl = self._offered().get(kind)
        if impl is None:
            return f"{kind.title} is not supported on the {self.name} platform"
        return impl.unavailable()

    def offered(self, kind: type[C]) -> C | None:
        """This platform's implementation of ``kind`` whether or not it is available here and now (to say how it
        would make a fault); None when it has none."""
        impl = self._offered().get(kind)
        assert impl is None or isinstance(impl, kind)
        return impl

    def capability(self, kind: type[C]) -> C:
        """This platform's implementation of ``kind``; FaultUnavailable (with ``lacks``' reason)
        when it has none or it is unavailable here."""
        reason = self.lacks(kind)
        if reason is not None:
            raise FaultUnavailable(reason)
        impl = self._offered()[kind]
        assert isinstance(impl, kind)
        return impl

    def store_host(self) -> str | None:
        """The node hosting the rendezvous store (c10d), or None when the store is
        not a node (etcd)."""
        return None

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


