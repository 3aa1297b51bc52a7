"""The closed set of event types a timeline holds: who says what, and what it carries.

One namespace of ``EventType`` constants per ``Source``, each in the module of its
source beside the payload classes its events carry (``fault_events``,
``rdzv_events``, ``agent_events``, ``progress_events``, ``checkpoint_events``,
``node_events``, ``runner_events``). A timeline may hold types not declared here
(a newer toolkit's, a script's own ``elastic_chaos.trainer.progress`` events): ``declared``
gives them an ``Undeclared`` payload that keeps their data as read, and they
match none of the constants.
"""
from __future__ import annotations

from typing import Any

from elastic_chaos.events.agent_events import AgentEv
from elastic_chaos.events.checkpoint_events import CheckpointEv
from elastic_chaos.events.fault_events import FaultEv
from elastic_chaos.events.node_events import NodeEv
from elastic_chaos.events.progress_events import ProgressEv
from elastic_chaos.events.rdzv_events import RdzvEv
from elastic_chaos.events.runner_events import RunnerEv
from elastic_chaos.events.types import EventType, undeclared

__all__ = ["ALL_TYPES", "NAMESPACES", "AgentEv", "CheckpointEv", "FaultEv", "NodeEv", "ProgressEv", "RdzvEv",
           "RunnerEv", "declared"]

NAMESPACES: tuple[type, ...] = (FaultEv, RdzvEv, AgentEv, ProgressEv, CheckpointEv, NodeEv, RunnerEv)

ALL_TYPES: frozenset[EventType[Any]] = frozenset(
    v for ns in NAMESPACES for v in vars(ns).values() if isinstance(v, EventType))
"""Every declared event type."""

_BY_WIRE: dict[tuple[str, str], EventType[Any]] = {(t.source, t.name): t for t in ALL_TYPES}


def declared(source: str, name: str) -> EventType[Any]:
    """The declared type of (``source``, ``name``) as the wire names it, with its payload
    class; an undeclared type (its data read as ``Undeclared``) when there is none."""
    return _BY_WIRE.get((source, name)) or undeclared(source, name)
