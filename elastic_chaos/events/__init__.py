"""One timeline of everything observed during a run, and the closed vocabulary of
what it can hold: ``timeline`` (Event, Timeline, the query helpers and the one
typed reader of timeline.jsonl), ``vocabulary`` (one namespace of types per
source) and ``payload`` (each type's data, declared next to it)."""
from __future__ import annotations

from elastic_chaos.events.payload import Nothing, Payload, PayloadError, Undeclared, field_value, payload_json
from elastic_chaos.events.timeline import (
    Event,
    LineError,
    Selector,
    Timeline,
    TimelineRead,
    first,
    last,
    of,
    read_events,
    read_timeline,
)
from elastic_chaos.events.types import EventType, Source, node_name
from elastic_chaos.events.vocabulary import (
    ALL_TYPES,
    AgentEv,
    CheckpointEv,
    FaultEv,
    NodeEv,
    ProgressEv,
    RdzvEv,
    RunnerEv,
    declared,
)

__all__ = [
    "ALL_TYPES", "AgentEv", "CheckpointEv", "Event", "EventType", "FaultEv", "LineError", "NodeEv", "Nothing",
    "Payload", "PayloadError", "ProgressEv", "RdzvEv", "RunnerEv", "Selector", "Source", "Timeline",
    "TimelineRead", "Undeclared", "declared", "field_value", "first", "last", "node_name", "of", "payload_json",
    "read_events", "read_timeline",
]
