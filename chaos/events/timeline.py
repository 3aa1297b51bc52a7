"""One timeline of everything observed during a run, appended to JSONL as it happens.

Every watcher, fault and the runner itself add Events to a single Timeline.
Each event is written (and flushed) the moment it is added, so a run that
crashes still leaves its evidence on disk. Times are wall-clock seconds
(``time.time()``) stamped as close to the source as possible: the trainer
stamps its own steps, a fault stamps the instant it hit.

Events are selected by type (``chaos.events.vocabulary``) with the helpers at
the end: ``of``, ``first``, ``last`` over any list of events, ``Timeline.select``
over a live timeline.
"""
from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import IO, Any

from chaos.events.vocabulary import EventType, ProgressEv, Source


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _opt_int(v: Any) -> bool:
    return v is None or _int(v)


def _opt_str(v: Any) -> bool:
    return v is None or isinstance(v, str)


def _any(v: Any) -> bool:
    return True


def _participants(v: Any) -> bool:
    return v is None or (isinstance(v, list) and all(isinstance(p, dict) and _opt_str(p.get("node"))
                                                       for p in v))


def _ranges(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(r, list) and len(r) == 2 and all(_int(x) for x in r)
                                       for r in v)


_FIELD_OK: dict[str, Callable[[Any], bool]] = {
    # the data fields the analysis reads as numbers, names or lists, by name (a field means
    # the same in every event type that carries it)
    "step": _int, "world_size": _opt_int, "rank": _opt_int, "pid": _opt_int, "restart_count": _opt_int,
    "group_world_size": _opt_int, "round": _opt_int, "exit_code": _opt_int, "epoch": _opt_int,
    "epoch_size": _opt_int, "step_from": _opt_int, "fault": _opt_str, "phase": _opt_str, "replaces": _opt_str,
    "via": _opt_str, "cause": _opt_str, "root": _opt_str, "world_size_from": _opt_str, "participants": _participants,
    "wait_list": _participants, "samples": _ranges,
}
_REQUIRED: dict[EventType, tuple[str, ...]] = {ProgressEv.STEP: ("step",)}
_MAX_T = 1e11
"""Seconds since the epoch beyond which a time is not a time (year ~5138)."""

Selector = EventType | Source
"""What the query helpers select by: one event type, or every type of a source."""


@dataclass(frozen=True)
class Event:
    """One observation. ``source`` and ``kind`` are the wire strings; compare ``type``."""

    t: float
    source: str
    kind: str
    node: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def type(self) -> EventType:
        """This event's (source, kind), to compare with the vocabulary's constants."""
        return EventType(self.source, self.kind)

    @classmethod
    def make(cls, type: EventType, t: float, node: str | None = None,
             data: dict[str, Any] | None = None) -> Event:
        """An event of ``type`` (what tests and parsers build; a run adds them with ``Timeline.emit``)."""
        return cls(t=t, source=type.source, kind=type.kind, node=node, data={} if data is None else data)

    def to_json(self) -> dict[str, Any]:
        return {"t": round(self.t, 6), "source": self.source, "kind": self.kind,
                "node": self.node, "data": self.data}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Event:
        """An event read back from timeline.jsonl. Raises ValueError for a line whose
        envelope or well-known data fields have the wrong type (a file is input: the
        analysis trusts what it reads)."""
        t, source, kind, node = raw["t"], raw["source"], raw["kind"], raw.get("node")
        data = raw.get("data") or {}
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or abs(t) > _MAX_T:
            raise ValueError(f"t {t!r} is not a time")
        if not isinstance(source, str) or not isinstance(kind, str) or not (node is None or isinstance(node, str)):
            raise ValueError("source, kind and node must be strings")
        if not isinstance(data, dict) or not all(_FIELD_OK.get(k, _any)(v) for k, v in data.items()):
            raise ValueError(f"data of {source}/{kind} has a field of the wrong type")
        if any(k not in data for k in _REQUIRED.get(EventType(source, kind), ())):
            raise ValueError(f"{source}/{kind} lacks {_REQUIRED[EventType(source, kind)]}")
        return cls(t=float(t), source=source, kind=kind, node=node, data=dict(data))


class Timeline:
    """Thread-safe, append-only event log; optionally mirrored to a JSONL file.

    ``wait_for`` blocks until an event matching a predicate has been added
    (or a timeout passes), so scenario code never polls with sleeps.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._events: list[Event] = []
        self._cond = threading.Condition()
        self._file: IO[str] | None = None
        self._listeners: list[Callable[[Event], None]] = []
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")

    def add(self, event: Event) -> Event:
        with self._cond:
            self._events.append(event)
            if self._file is not None:
                self._file.write(json.dumps(event.to_json(), separators=(",", ":")) + "\n")
                self._file.flush()
            self._cond.notify_all()
            listeners = list(self._listeners)
        for listener in listeners:
            listener(event)
        return event

    def emit(self, type: EventType, node: str | None = None, *,
             t: float | None = None, **data: Any) -> Event:
        """Add an event of ``type`` (timed now unless ``t`` is given); returns it."""
        return self.add(Event(t=time.time() if t is None else t, source=type.source,
                              kind=type.kind, node=node, data=data))

    def subscribe(self, listener: Callable[[Event], None]) -> None:
        """Call ``listener`` for every later event (from the adding thread; keep it quick)."""
        with self._cond:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[Event], None]) -> None:
        with self._cond:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def events(self) -> list[Event]:
        """A snapshot, ordered by time (watchers may add slightly out of order)."""
        with self._cond:
            return sorted(self._events, key=lambda e: e.t)

    def select(self, *types: Selector, node: str | None = None, after: float | None = None,
               until: float | None = None) -> list[Event]:
        """``of(self.events(), ...)``: a snapshot of the matching events, in time order."""
        return of(self.events(), *types, node=node, after=after, until=until)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events())

    def __len__(self) -> int:
        with self._cond:
            return len(self._events)

    def wait_for(self, predicate: Callable[[Event], bool], timeout: float,
                 *, since: int = 0) -> Event | None:
        """The first event (in arrival order, from index ``since``) matching ``predicate``."""
        deadline = time.monotonic() + timeout
        seen = since
        with self._cond:
            while True:
                for ev in self._events[seen:]:
                    if predicate(ev):
                        return ev
                seen = len(self._events)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(min(left, 1.0))

    def close(self) -> None:
        with self._cond:
            if self._file is not None:
                self._file.close()
                self._file = None

    @classmethod
    def load(cls, path: Path) -> Timeline:
        """Read a timeline file; lines that do not parse (a crash mid-write) are skipped."""
        tl = cls()
        for ev in read_events(path):
            tl._events.append(ev)
        return tl


def read_events(path: Path) -> Iterable[Event]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                yield Event.from_json(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue


def _matcher(types: tuple[Selector, ...]) -> Callable[[Event], bool]:
    if not types:
        return lambda e: True
    exact = frozenset(t for t in types if isinstance(t, EventType))
    sources = frozenset(t.value for t in types if isinstance(t, Source))
    return lambda e: e.source in sources or e.type in exact


def _select(events: Iterable[Event], types: tuple[Selector, ...], node: str | None, after: float | None,
            until: float | None, where: Callable[[Event], bool] | None = None) -> Iterator[Event]:
    match = _matcher(types)
    return (e for e in events if match(e) and (node is None or e.node == node)
            and (after is None or e.t > after) and (until is None or e.t <= until) and (where is None or where(e)))


def of(events: Iterable[Event], *types: Selector, node: str | None = None,
       after: float | None = None, until: float | None = None) -> list[Event]:
    """The events of any of ``types`` (every event when none is given; a ``Source``
    stands for all its types), in time order (a stable sort: ties keep their order).
    ``node``: only that node's; ``after``: only later than (exclusive); ``until``:
    only up to (inclusive)."""
    return sorted(_select(events, types, node, after, until), key=lambda e: e.t)


def participant_nodes(e: Event, key: str = "participants") -> tuple[str, ...]:
    """The node names in a rendezvous event's ``key`` list (``participants``, ``wait_list``),
    the agent id where the node is not known."""
    return tuple(str(p.get("node") or p.get("id") or "?") for p in e.data.get(key) or [] if isinstance(p, dict))


def first(events: Iterable[Event], *types: Selector, after: float | None = None, node: str | None = None,
          until: float | None = None, where: Callable[[Event], bool] | None = None) -> Event | None:
    """The earliest event ``of(...)`` selects for which ``where`` holds (of equal times,
    the one met first); None when there is none."""
    return min(_select(events, types, node, after, until, where), key=lambda e: e.t, default=None)


def last(events: Iterable[Event], *types: Selector, after: float | None = None, node: str | None = None,
         until: float | None = None, where: Callable[[Event], bool] | None = None) -> Event | None:
    """The latest event ``of(...)`` selects for which ``where`` holds (of equal times,
    the one met last); None when there is none."""
    found: Event | None = None
    for e in _select(events, types, node, after, until, where):
        if found is None or e.t >= found.t:
            found = e
    return found
