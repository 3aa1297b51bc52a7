"""Who observed an event (``Source``) and what kind of event it is (``EventType``).

An event's ``source`` and ``name`` stay plain strings on the wire (timeline.jsonl
is read back by reports, audits and older tools: the JSON keys are ``source``
and ``kind``); in code an event's type is an ``EventType`` constant from one of
the namespaces of elastic_chaos.events.vocabulary (``e.type == ProgressEv.STEP``), so a
typo is a NameError instead of a silently empty filter. Each type carries the
payload class its data is (elastic_chaos.events.payload): ``EventType[Step]``.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Generic

from typing_extensions import TypeVar

from elastic_chaos.events.payload import Payload, Undeclared

P = TypeVar("P", bound=Payload, default=Any)


class Source(str, enum.Enum):
    """Who observed an event."""

    FAULT = "fault"
    """A fault: planned, injected, reverted (faults, ChaosRun), or a loss a watch observed."""
    RENDEZVOUS = "rendezvous"
    """The rendezvous state in etcd (watchers/rendezvous.py)."""
    AGENT = "agent"
    """torchrun's own log lines (watchers/logs.py)."""
    PROGRESS = "progress"
    """The training script: elastic_chaos.trainer.progress lines, a script's regex, worker tracebacks."""
    CHECKPOINT = "checkpoint"
    """Checkpoint writes and restores: elastic_chaos.trainer.progress lines, a script's regex, the file watcher."""
    NODE = "node"
    """A node's (pod's, instance's) life as the platform sees it."""
    RUNNER = "runner"
    """The toolkit itself: ChaosRun phases, the platform starting and stopping things."""


@dataclass(frozen=True)
class EventType(Generic[P]):
    """One (source, name) and the payload its events carry. Two types are equal when their
    source and name are: a type read back from JSON compares equal to the constant."""

    source: str
    name: str
    payload: type[P] = field(default=Undeclared, compare=False, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if isinstance(self.source, Source):
            object.__setattr__(self, "source", self.source.value)

    def __str__(self) -> str:
        return f"{self.source}/{self.name}"


def event_type(source: Source, name: str, payload: type[P]) -> EventType[P]:
    """A declared type: ``STEP = event_type(Source.PROGRESS, "step", Step)``."""
    return EventType(source.value, name, payload)


def undeclared(source: str, name: str) -> EventType[Any]:
    """The type of an event the vocabulary does not declare (its data stays as read)."""
    return EventType(source, name, Undeclared)


def node_name(node: str | None) -> str:
    """A node as a sentence names it: an event or fault with no node is every node's (a storage
    fault on the shared volume, the rendezvous store)."""
    return node if node is not None else "every node"
