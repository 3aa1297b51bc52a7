"""torchrun's agent, from its glog lines and tracebacks in a node log (watchers/logs.py)."""
from __future__ import annotations

from dataclasses import dataclass

from elastic_chaos.events.payload import Nothing, Payload
from elastic_chaos.events.types import Source, event_type


@dataclass(frozen=True, kw_only=True)
class WorkerFailed(Payload):
    exitcode: int | None = None
    local_rank: int | None = None
    pid: int | None = None


@dataclass(frozen=True, kw_only=True)
class GroupFailed(Payload):
    attempts_left: int | None = None
    max_restarts: int | None = None


@dataclass(frozen=True, kw_only=True)
class Membership(Payload):
    new_nodes: int | None = None


@dataclass(frozen=True, kw_only=True)
class RoundResult(Payload):
    """The agent's rendezvous result block."""

    group_rank: int | None = None
    group_world_size: int | None = None
    restart_count: int | None = None


@dataclass(frozen=True, kw_only=True)
class Signalled(Payload):
    signal: str | int | None = None


@dataclass(frozen=True, kw_only=True)
class AgentError(Payload):
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class ClosingWorker(Payload):
    pid: int | None = None
    signal: str | int | None = None


@dataclass(frozen=True, kw_only=True)
class KillForced(ClosingWorker):
    kill_signal: str | int | None = None


class AgentEv:
    """torchrun's agent, from its glog lines and tracebacks in a node log (watchers/logs.py)."""

    WORKER_FAILED = event_type(Source.AGENT, "worker_failed", WorkerFailed)
    """A worker process of this node failed (``exitcode``, ``local_rank``, ``pid``)."""
    WORKER_GROUP_FAILED = event_type(Source.AGENT, "worker_group_failed", GroupFailed)
    """The node's worker group failed; one restart spent (``attempts_left``, ``max_restarts``)."""
    MEMBERSHIP_CHANGE = event_type(Source.AGENT, "membership_change", Membership)
    """The agent saw new nodes waiting (``new_nodes``) and restarts its workers to admit them."""
    RENDEZVOUS_STARTED = event_type(Source.AGENT, "rendezvous_started", Nothing)
    """The agent starts a rendezvous round."""
    RENDEZVOUS_COMPLETE = event_type(Source.AGENT, "rendezvous_complete", RoundResult)
    """The agent's round completed (``group_rank``, ``group_world_size``, ``restart_count``)."""
    WORKERS_STARTING = event_type(Source.AGENT, "workers_starting", Nothing)
    """The agent starts its worker group."""
    WORKERS_STOPPING = event_type(Source.AGENT, "workers_stopping", Nothing)
    """The agent stops its worker group."""
    WORKERS_FINISHED = event_type(Source.AGENT, "workers_finished", Nothing)
    """The worker group finished successfully."""
    SIGNAL_RECEIVED = event_type(Source.AGENT, "signal_received", Signalled)
    """The agent received a death signal (``signal``)."""
    RENDEZVOUS_CLOSED = event_type(Source.AGENT, "rendezvous_closed", Nothing)
    """The rendezvous is closed: the agent cannot join."""
    RENDEZVOUS_TIMEOUT = event_type(Source.AGENT, "rendezvous_timeout", Nothing)
    """The agent's rendezvous timed out."""
    RENDEZVOUS_ERROR = event_type(Source.AGENT, "rendezvous_error", AgentError)
    """A Rendezvous*Error in a traceback (``error``): e.g. the store is gone."""
    AGENT_GAVE_UP = event_type(Source.AGENT, "agent_gave_up", Nothing)
    """A ChildFailedError: the agent spent its restarts and exits."""
    CLOSING_WORKER = event_type(Source.AGENT, "closing_worker", ClosingWorker)
    """The agent sends a live worker its closing signal (``pid``, ``signal``): its shutdown wait
    starts (torch 2.13: 30 s when it restarts workers)."""
    WORKER_KILL_FORCED = event_type(Source.AGENT, "worker_kill_forced", KillForced)
    """A worker outlived the agent's shutdown wait after its closing signal (it ignored SIGTERM,
    e.g. blocked in a collective) and is killed (``pid``, ``signal``, ``kill_signal``)."""
