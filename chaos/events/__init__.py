"""One timeline of everything observed during a run, and the closed vocabulary of
what it can hold: ``timeline`` (Event, Timeline, the query helpers) and
``vocabulary`` (Source, EventType and one namespace of types per source)."""
from __future__ import annotations

from chaos.events.timeline import Event, Selector, Timeline, first, last, of, participant_nodes, read_events
from chaos.events.vocabulary import (
    ALL_TYPES,
    AgentEv,
    CheckpointEv,
    EventType,
    FaultEv,
    NodeEv,
    ProgressEv,
    RdzvEv,
    RunnerEv,
    Source,
)

__all__ = [
    "ALL_TYPES", "AgentEv", "CheckpointEv", "Event", "EventType", "FaultEv", "NodeEv", "ProgressEv",
    "RdzvEv", "RunnerEv", "Selector", "Source", "Timeline", "first", "last", "of", "participant_nodes",
    "read_events",
]
