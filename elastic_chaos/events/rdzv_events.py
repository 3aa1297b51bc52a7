"""The rendezvous key in etcd, long-polled by watchers/rendezvous.py."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from elastic_chaos.events.payload import Nothing, Payload
from elastic_chaos.events.types import Source, event_type


@dataclass(frozen=True, kw_only=True)
class Participant(Payload):
    """A node descriptor of the rendezvous state, with the platform's name for it."""

    node: str | None = None
    """The platform's node name (None where the watcher could not tell)."""
    id: str | None = None
    """torch's node descriptor (``host_pid_index``)."""
    rank: int | None = None
    """Its rank in the round (participants only)."""


@dataclass(frozen=True, kw_only=True)
class RdzvState(Payload):
    """The decoded rendezvous state (watchers/rendezvous.py ``describe``)."""

    round: int | None = None
    complete: bool = False
    closed: bool = False
    participants: tuple[Participant, ...] = ()
    wait_list: tuple[Participant, ...] = ()
    redundancy_list: tuple[Participant, ...] = ()
    num_nodes: int | None = None
    """The round's size once complete."""
    deadline: float | None = None
    """The round's last-call deadline (epoch seconds)."""
    heartbeats: Mapping[str, float] = field(default_factory=dict)
    """Each node descriptor's last heartbeat (epoch seconds)."""

    def nodes(self, which: str = "participants") -> tuple[str, ...]:
        """The node names of ``participants`` or ``wait_list`` (the descriptor where the node is not known)."""
        members: tuple[Participant, ...] = getattr(self, which)
        return tuple(p.node or p.id or "?" for p in members)


@dataclass(frozen=True, kw_only=True)
class StoreError(Payload):
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class Unreadable(Payload):
    reason: str | None = None


class RdzvEv:
    """The rendezvous key in etcd, long-polled by watchers/rendezvous.py."""

    STATE = event_type(Source.RENDEZVOUS, "state", RdzvState)
    """The rendezvous state changed (round, participants, wait list, heartbeats; not every heartbeat)."""
    ROUND_COMPLETE = event_type(Source.RENDEZVOUS, "round_complete", RdzvState)
    """A round became complete, once per round."""
    DELETED = event_type(Source.RENDEZVOUS, "deleted", Nothing)
    """The rendezvous key was deleted or expired."""
    STORE_UNREACHABLE = event_type(Source.RENDEZVOUS, "store_unreachable", StoreError)
    """etcd stopped answering (``error``)."""
    STORE_REACHABLE = event_type(Source.RENDEZVOUS, "store_reachable", Nothing)
    """etcd answers again after being unreachable."""
    REFUSED = event_type(Source.RENDEZVOUS, "refused", Unreadable)
    """The state named a class the allow-list unpickler refuses (``reason``)."""
    UNDECODABLE = event_type(Source.RENDEZVOUS, "undecodable", Unreadable)
    """The state could not be decoded (``reason``)."""
