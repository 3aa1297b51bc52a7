"""What a platform can do to a job besides running it and losing a node: one small class each.

Every platform can start a job, list its nodes and take one away (elastic_chaos.platforms.api).
Everything else is a capability a platform may have: a spot notice, a partition, a
freeze, a worker killed or hung, a node added, the store stopped, a node slowed, the
checkpoint volume made slow, hung, full, failing or read-only. Each
is a class here with the public methods every implementation shares (the target
checked, the timeline event emitted: torchx's Scheduler pattern, per capability) and
the hooks an implementation fills in. A platform offers the implementations it has
(``Platform._offers``); what it lacks is derived from that, never listed: a fault that
``requires`` a capability its platform does not offer is refused with the reason
(``Platform.lacks``), and its scenario skips. An implementation may also be
unavailable here and now (a partition without root): its ``unavailable()`` says why.

Adding a capability: one class here, one implementation in each platform package that
can make it, and the fault that ``requires`` it (docs/ARCHITECTURE.md, "Where to add").
"""
from __future__ import annotations

import abc
import enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from elastic_chaos.events import CheckpointEv, NodeEv, RunnerEv, Timeline
from elastic_chaos.events.checkpoint_events import StoragePaused
from elastic_chaos.events.node_events import (
    Acted,
    LinkDegraded,
    Notice,
    Restored,
    Slowed,
    StorageFault,
    StorageRestored,
    WorkerActed,
)
from elastic_chaos.events.runner_events import StoreStopped
from elastic_chaos.platforms.nodes import Hit, NodeInfo
from elastic_chaos.spec import JobSpec

if TYPE_CHECKING:   # the storage layer needs tenacity; the local cluster imports this module with stdlib alone
    from elastic_chaos.storagefs.controller import Paused
    from elastic_chaos.storagefs.oplog import OpRecord
    from elastic_chaos.storagefs.rules import Rule, SavePoint


class Host(Protocol):
    """What a capability asks of its platform (elastic_chaos.platforms.api.Platform is one)."""

    timeline: Timeline
    job: JobSpec | None

    def _require_node(self, node: str) -> NodeInfo:
        """The live node ``node``; InjectionFailed when it is gone or unknown."""

    def store_host(self) -> str | None: ...


class Capability(abc.ABC):  # noqa: B024 - each kind below declares its own abstract hooks
    """One thing a platform can do to a job; implemented per platform (see the module docstring)."""

    title: ClassVar[str] = "a capability"
    """What it is, in words: '<title> is not supported on the local platform'."""

    def __init__(self, platform: Host) -> None:
        self.platform = platform

    def unavailable(self) -> str | None:
        """Why this platform cannot do it here and now (None: it can)."""
        return None


class NoticeSender(Capability):
    """Spot notices a node can observe (its instance-metadata service)."""

    title = "spot notice"

    def send_notice(self, node: str, kind: str, *, terminate_at: float) -> Hit:
        """Publish a ``rebalance`` or ``interruption`` notice ``node`` can observe."""
        self.platform._require_node(node)
        hit = self._send(node, kind, terminate_at=terminate_at)
        self.platform.timeline.emit(NodeEv.NOTICE, node, Notice(notice=kind, terminate_at=terminate_at), t=hit.at)
        return hit

    @abc.abstractmethod
    def _send(self, node: str, kind: str, *, terminate_at: float) -> Hit: ...


class Partitioner(Capability):
    """A node's network cut off (every packet black-holed) and healed; its processes keep running."""

    title = "network partition"

    def cut(self, node: str) -> Hit:
        self.platform._require_node(node)
        hit = self._cut(node)
        self.platform.timeline.emit(NodeEv.PARTITIONED, node, t=hit.at)
        return hit

    def heal(self, node: str) -> Hit:
        """Undo ``cut``. Idempotent; a gone node is nothing to heal."""
        hit = self._heal(node)
        self.platform.timeline.emit(NodeEv.HEALED, node, t=hit.at)
        return hit

    @abc.abstractmethod
    def _cut(self, node: str) -> Hit: ...

    @abc.abstractmethod
    def _heal(self, node: str) -> Hit: ...


class Freezer(Capability):
    """Every process of a node stopped at once (a hung host), sockets left open; and thawed."""

    title = "node freeze"

    def freeze(self, node: str) -> Hit:
        self.platform._require_node(node)
        hit = self._freeze(node)
        self.platform.timeline.emit(NodeEv.FROZEN, node, Acted(action=hit.action, pids=hit.pids), t=hit.at)
        return hit

    def thaw(self, node: str) -> Hit:
        """Undo ``freeze``. Idempotent."""
        hit = self._thaw(node)
        self.platform.timeline.emit(NodeEv.THAWED, node, t=hit.at)
        return hit

    @abc.abstractmethod
    def _freeze(self, node: str) -> Hit: ...

    @abc.abstractmethod
    def _thaw(self, node: str) -> Hit: ...


class WorkerKiller(Capability):
    """One worker process of a node SIGKILLed; the node and its agent stay."""

    title = "worker crash"

    def kill_worker(self, node: str, *, local_rank: int = 0) -> Hit:
        self.platform._require_node(node)
        hit = self._kill(node, local_rank=local_rank)
        self.platform.timeline.emit(NodeEv.WORKER_KILLED, node, WorkerActed(pids=hit.pids, local_rank=local_rank),
                                    t=hit.at)
        return hit

    @abc.abstractmethod
    def _kill(self, node: str, *, local_rank: int) -> Hit: ...


class NodeAdder(Capability):
    """One more node of the running job (scale-up). Blocks until its agent starts."""

    title = "scale-up"

    def add_node(self) -> NodeInfo:
        from elastic_chaos.errors import PlatformError
        if self.platform.job is None:
            raise PlatformError("no job is running")
        return self._add()

    @abc.abstractmethod
    def _add(self) -> NodeInfo: ...


class StoreOutage(str, enum.Enum):
    CRASH = "crash"
    """The store process is killed: clients get connection refused at once."""
    HANG = "hang"
    """The store process is stopped: connections are accepted and never answered."""


class StoreStopper(Capability):
    """The rendezvous store (etcd) taken away, crashed or hung, and brought back with its data."""

    title = "rendezvous store outage"

    def stop_store(self, *, how: StoreOutage = StoreOutage.CRASH) -> Hit:
        hit = self._stop(how=how)
        self.platform.timeline.emit(RunnerEv.STORE_STOPPED, None, StoreStopped(action=hit.action, how=how.value),
                                    t=hit.at)
        return hit

    def start_store(self) -> Hit:
        """Bring the store back (restart, or resume a hung one); blocks until it serves. Idempotent."""
        hit = self._start()
        self.platform.timeline.emit(RunnerEv.STORE_STARTED, t=hit.at)
        return hit

    @abc.abstractmethod
    def _stop(self, *, how: StoreOutage) -> Hit: ...

    @abc.abstractmethod
    def _start(self) -> Hit: ...


class StoreHost(Capability):
    """A c10d rendezvous store hosted by a node, that a fault can take away with its node."""

    title = "a c10d rendezvous store hosted by a node"

    def host(self) -> str | None:
        """The node hosting the store (None: the store is no node: etcd)."""
        return self.platform.store_host()


class Slower(Capability):
    """A node run at 1/factor of its speed (a stop/continue duty cycle), and back at full speed."""

    title = "slowing a node down"

    def slow(self, node: str, *, factor: float, period_s: float) -> Hit:
        """Every process of ``node`` runs only 1/``factor`` of each ``period_s``, until ``restore``.
        Returns at once (the slowing goes on in the background)."""
        self.platform._require_node(node)
        hit = self._slow(node, factor=factor, period_s=period_s)
        self.platform.timeline.emit(NodeEv.SLOWED, node, Slowed.read(
            {**hit.detail, "action": hit.action, "factor": factor, "period_s": period_s}), t=hit.at)
        return hit

    def restore(self, node: str) -> Hit:
        """Undo ``slow``: full speed, nothing of the node left stopped. Idempotent."""
        hit = self._restore(node)
        self.platform.timeline.emit(NodeEv.RESTORED, node, Restored.read({**hit.detail, "action": hit.action}),
                                    t=hit.at)
        return hit

    @abc.abstractmethod
    def _slow(self, node: str, *, factor: float, period_s: float) -> Hit: ...

    @abc.abstractmethod
    def _restore(self, node: str) -> Hit: ...


class WorkerHanger(Capability):
    """One worker process stopped where it is (SIGSTOP): alive, its node and agent alive, its
    peers blocked in their next collective; and continued."""

    title = "hanging one worker"

    def hang(self, node: str, *, local_rank: int = 0) -> Hit:
        """``hit.pids`` is the worker."""
        self.platform._require_node(node)
        hit = self._hang(node, local_rank=local_rank)
        self.platform.timeline.emit(NodeEv.WORKER_HUNG, node, WorkerActed(pids=hit.pids, local_rank=local_rank),
                                    t=hit.at)
        return hit

    def resume(self, node: str, pid: int) -> Hit:
        """Undo ``hang`` for the worker ``pid`` if it is still that process. Idempotent; a worker
        its agent has killed meanwhile is nothing to resume."""
        hit = self._resume(node, pid)
        self.platform.timeline.emit(NodeEv.WORKER_RESUMED, node, Acted(action=hit.action, pids=hit.pids), t=hit.at)
        return hit

    @abc.abstractmethod
    def _hang(self, node: str, *, local_rank: int) -> Hit: ...

    @abc.abstractmethod
    def _resume(self, node: str, pid: int) -> Hit: ...


class CheckpointStorage(Capability):
    """The job's checkpoint volume behind a storage layer (elastic_chaos.storagefs, mounted
    before the nodes start): made slow, hung, full, failing or read-only for one node or all,
    and a writer stopped at an exact point of its save. Read the volume with ``direct()``,
    never through the mount: an op held there would hold the reader too."""

    title = "storage faults on the checkpoint volume"

    def apply(self, fault: str, rule: Rule, *, node: str | None = None) -> Hit:
        """Make the volume misbehave by ``rule`` for ``node``'s processes (None: every node's)
        until ``restore``; returns at once. ``hit.detail["rule"]`` names it for ``restore``."""
        from elastic_chaos.storagefs.rules import describe
        if node is not None:
            self.platform._require_node(node)
        hit = self._apply(rule, node=node)
        self.platform.timeline.emit(NodeEv.STORAGE_FAULT, node, StorageFault(
            fault=fault, rule=hit.detail["rule"], detail=describe(rule), mountpoint=str(self.mountpoint())), t=hit.at)
        return hit

    def restore(self, fault: str, rule: str, *, node: str | None = None) -> Hit:
        """Undo ``apply`` of the rule named ``rule``: ops it held or slowed go on at once.
        Idempotent (a one-shot rule that fired, an expired hang: nothing to clear)."""
        hit = self._restore(rule)
        self.platform.timeline.emit(NodeEv.STORAGE_RESTORED, node, StorageRestored(
            fault=fault, rule=rule, action=hit.action), t=hit.at)
        return hit

    def aim(self, point: SavePoint, *, path: str, after_bytes: int = 0, node: str | None = None) -> Hit:
        """Hold the first op that reaches ``point`` of a save to a file matching ``path`` (a
        glob inside the volume) until ``release``; one-shot. ``wait_writer`` says who it held."""
        from elastic_chaos.errors import storagefs_errors
        from elastic_chaos.storagefs.rules import CrashPoint
        with storagefs_errors():
            rule = CrashPoint(point, path=path, after_bytes=after_bytes)
        return self.apply("kill-at-save-point", rule, node=node)

    def wait_writer(self, timeout_s: float) -> Paused:
        """Block until a crash point holds a writer; returns who (pid, node), where and what.
        WaitTimeout after ``timeout_s``."""
        paused = self._wait_pause(timeout_s)
        self.platform.timeline.emit(CheckpointEv.STORAGE_PAUSED, paused.node, StoragePaused(
            point=paused.point.value, path=paused.path, pid=paused.pid, bytes=paused.bytes), t=paused.t)
        return paused

    def release(self, pause: int | None = None) -> list[Paused]:
        """Let the held op ``pause`` (every held op when None) go on; a no-op once its writer
        died (the op was not done). Idempotent."""
        return self._release(pause)

    @abc.abstractmethod
    def _apply(self, rule: Rule, *, node: str | None) -> Hit: ...

    @abc.abstractmethod
    def _restore(self, rule: str) -> Hit: ...

    @abc.abstractmethod
    def _wait_pause(self, timeout_s: float) -> Paused: ...

    @abc.abstractmethod
    def _release(self, pause: int | None) -> list[Paused]: ...

    @abc.abstractmethod
    def ops(self) -> list[OpRecord]:
        """The volume's op log so far (elastic_chaos.storagefs.oplog)."""

    @abc.abstractmethod
    def direct(self) -> Path:
        """The volume's folder reached without the mount, for this process (read it there)."""

    @abc.abstractmethod
    def mountpoint(self) -> Path:
        """Where the volume is mounted on this machine."""

    @abc.abstractmethod
    def op_log(self) -> Path:
        """The op log's file (JSON lines; it stays after the unmount)."""

    @abc.abstractmethod
    def view(self, path: Path) -> Path:
        """Where this process reads ``path`` now: through ``direct()`` while it lies inside the
        mounted volume, else ``path`` itself. Touches no file."""


class LinkDegrader(Capability):
    """The network between a node and some of its peers made lossy, slow, or flapping down
    and up, while every process runs on; and whole again (elastic_chaos.faults.network)."""

    title = "degrading the network between nodes"

    def degrade(self, node: str, peers: tuple[str, ...], *, loss: float = 0.0, rate_kbit: int | None = None,
                down_s: float | None = None, up_s: float | None = None, delay_ms: float | None = None,
                jitter_ms: float = 0.0, to_store: bool = False, reverse_delay_ms: float | None = None,
                reverse_jitter_ms: float | None = None, burst: float | None = None) -> Hit:
        """Drop ``loss`` of the packets each way between ``node`` and ``peers`` (every other live
        node when empty; with ``burst``, in bursts of that many packets on average), cap the rate at
        ``rate_kbit`` each way, delay every packet ``delay_ms`` (+- ``jitter_ms``) each way (with
        ``reverse_delay_ms`` / ``reverse_jitter_ms``: those on the packets the peers send the node),
        or, with ``down_s`` and ``up_s``,
        take the link down for ``down_s`` then up for ``up_s`` until ``restore``. Returns at once;
        ``to_store``: the node's link to the rendezvous store instead (``peers`` empty; loss and
        delay only). ``hit.detail``: ``link`` (the name ``restore`` takes), ``peers``, ``probe`` (what was
        measured across the link once it was degraded; ``baseline``: before)."""
        self.platform._require_node(node)
        for peer in peers:
            self.platform._require_node(peer)
        more = {k: v for k, v in (("reverse_delay_ms", reverse_delay_ms), ("reverse_jitter_ms", reverse_jitter_ms),
                                  ("burst", burst)) if v is not None}
        hit = self._degrade(node, peers, loss=loss, rate_kbit=rate_kbit, down_s=down_s, up_s=up_s,
                            delay_ms=delay_ms, jitter_ms=jitter_ms, to_store=to_store, **more)
        self.platform.timeline.emit(NodeEv.LINK_DEGRADED, node, LinkDegraded(
            action=hit.action, link=hit.detail.get("link"), peers=tuple(hit.detail.get("peers", ())),
            loss=loss or None, rate_kbit=rate_kbit, down_s=down_s, up_s=up_s, delay_ms=delay_ms,
            jitter_ms=jitter_ms if delay_ms is not None else None, to_store=to_store or None, extra=more), t=hit.at)
        return hit

    def plan_steps(self, shape: dict[str, Any], node: str, who: str, until: str) -> tuple[str, ...] | None:
        """The fault's plan in this platform's words, where the platform does not make it with the toolkit's
        own rules and qdiscs and probe it (``shape``: the keywords of :meth:`degrade`); None: the fault's own
        words are true here."""
        return None

    def restore(self, node: str, link: str) -> Hit:
        """Undo ``degrade`` of ``link``: every rule and qdisc it made removed, a flapping link
        left up. Idempotent; a gone node's link is nothing to restore."""
        hit = self._restore(node, link)
        self.platform.timeline.emit(NodeEv.LINK_RESTORED, node, Acted.read({**hit.detail, "action": hit.action}),
                                    t=hit.at)
        return hit

    @abc.abstractmethod
    def _degrade(self, node: str, peers: tuple[str, ...], *, loss: float, rate_kbit: int | None,
                 down_s: float | None, up_s: float | None, delay_ms: float | None, jitter_ms: float,
                 to_store: bool, reverse_delay_ms: float | None = None, reverse_jitter_ms: float | None = None,
                 burst: float | None = None) -> Hit: ...

    @abc.abstractmethod
    def _restore(self, node: str, link: str) -> Hit: ...


CAPABILITIES: tuple[type[Capability], ...] = (NoticeSender, Partitioner, Freezer, WorkerKiller, NodeAdder,
                                              StoreStopper, StoreHost, Slower, WorkerHanger, CheckpointStorage,
                                              LinkDegrader)
"""Every capability a platform may offer (a platform's implementation subclasses one of them)."""


def kind_of(impl: Capability) -> type[Capability]:
    """The capability ``impl`` implements (the one of CAPABILITIES it subclasses)."""
    return next(c for c in type(impl).__mro__ if c in CAPABILITIES)
