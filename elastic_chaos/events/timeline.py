"""One timeline of everything observed during a run, appended to JSONL as it happens.

Every watcher, fault and the runner itself add Events to a single Timeline.
Each event is written (and flushed) the moment it is added, so a run that
crashes still leaves its evidence on disk. Times are wall-clock seconds
(``time.time()``) stamped as close to the source as possible: the trainer
stamps its own steps, a fault stamps the instant it hit.

An event's ``data`` is its type's payload (elastic_chaos.events.payload): built by
whoever saw the event, read back from timeline.jsonl through the same class.
Events are selected by type (elastic_chaos.events.vocabulary) with the helpers at the
end: ``of``, ``first``, ``last`` over any list of events, ``Timeline.select``
over a live timeline; selecting one type gives its payload's type to the
checker (``first(events, ProgressEv.STEP).data.step`` is an int).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Generic, overload

from typing_extensions import TypeVar

from elastic_chaos.events.payload import Payload, PayloadError, payload_json, read_payload
from elastic_chaos.events.types import EventType, Source
from elastic_chaos.events.vocabulary import declared

P = TypeVar("P", bound=Payload, default=Any)
_MAX_T = 1e11
"""Seconds since the epoch beyond which a time is not a time (year ~5138)."""

Selector = EventType[Any] | Source
"""What the query helpers select by: one event type, or every type of a source."""


@dataclass(frozen=True)
class Event(Generic[P]):
    """One observation: when, what (``type``), where (``node``) and its payload (``data``)."""

    t: float
    type: EventType[P]
    node: str | None
    data: P

    @classmethod
    def make(cls, type: EventType[P], t: float, node: str | None = None,
             data: P | Mapping[str, Any] | None = None) -> Event[P]:
        """An event of ``type``. ``data`` is its payload, or a JSON object read as one (a parsed
        log line, a test's literal: PayloadError for a field of the wrong type); None for a
        payload of defaults."""
        if data is None:
            payload = type.payload()
        elif isinstance(data, Payload):
            if not isinstance(data, type.payload):
                raise TypeError(f"{type} carries {type.payload.__name__}, not {data.__class__.__name__}")
            payload = data
        else:
            payload = read_payload(type.payload, data, what=str(type))
        return cls(t=t, type=type, node=node, data=payload)

    def to_json(self) -> dict[str, Any]:
        return {"t": round(self.t, 6), "source": self.type.source, "kind": self.type.name,
                "node": self.node, "data": payload_json(self.data)}

    @classmethod
    def from_json(cls, raw: Any) -> Event[Any]:
        """An event read back from a timeline.jsonl line (the JSON object). Raises ValueError
        (PayloadError for the data) naming what is wrong: the file is input, and the analysis
        trusts what it reads."""
        if not isinstance(raw, dict):
            raise ValueError("a line must be a JSON object")
        t, source, name, node, data = (raw.get("t"), raw.get("source"), raw.get("kind"), raw.get("node"),
                                       raw.get("data"))
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or abs(t) > _MAX_T:
            raise ValueError(f"t {t!r} is not a time")
        if not isinstance(source, str) or not isinstance(name, str) or not (node is None or isinstance(node, str)):
            raise ValueError("source, kind and node must be strings")
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ValueError(f"the data of {source}/{name} is not an object")
        type = declared(source, name)
        return cls(t=float(t), type=type, node=node, data=read_payload(type.payload, data, what=f"{source}/{name}"))


class Timeline:
    """Thread-safe, append-only event log; optionally mirrored to a JSONL file.

    ``wait_for`` blocks until an event matching a predicate has been added
    (or a timeout passes), so scenario code never polls with sleeps.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.write_error: OSError | None = None
        """The first failed write of the file (a full disk): later events are kept in memory and written
        by ``flush_unwritten`` once there is room; the adders never see the error."""
        self._unwritten: list[Event[Any]] = []
        self._whole = 0
        """The file's size after its last whole line."""
        self._events: list[Event[Any]] = []
        self._cond = threading.Condition()
        self._file: IO[str] | None = None
        self._listeners: list[Callable[[Event[Any]], None]] = []
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")
            self._whole = self._file.tell()

    def add(self, event: Event[P]) -> Event[P]:
        with self._cond:
            self._events.append(event)
            self._write(event)
            self._cond.notify_all()
            listeners = list(self._listeners)
        for listener in listeners:
            listener(event)
        return event

    def emit(self, type: EventType[P], node: str | None = None, data: P | None = None, *,
             t: float | None = None) -> Event[P]:
        """Add an event of ``type`` with payload ``data`` (timed now unless ``t`` is given); returns it."""
        return self.add(Event.make(type, time.time() if t is None else t, node, data))

    def subscribe(self, listener: Callable[[Event[Any]], None]) -> None:
        """Call ``listener`` for every later event (from the adding thread; keep it quick)."""
        with self._cond:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[Event[Any]], None]) -> None:
        with self._cond:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def events(self) -> list[Event[Any]]:
        """A snapshot, ordered by time (watchers may add slightly out of order)."""
        with self._cond:
            return sorted(self._events, key=lambda e: e.t)

    @overload
    def select(self, type: EventType[P], /, *, node: str | None = None, after: float | None = None,
               until: float | None = None) -> list[Event[P]]: ...

    @overload
    def select(self, *types: Selector, node: str | None = None, after: float | None = None,
               until: float | None = None) -> list[Event[Any]]: ...

    def select(self, *types: Selector, node: str | None = None, after: float | None = None,
               until: float | None = None) -> list[Event[Any]]:
        """``of(self.events(), ...)``: a snapshot of the matching events, in time order."""
        return of(self.events(), *types, node=node, after=after, until=until)

    def __iter__(self) -> Iterator[Event[Any]]:
        return iter(self.events())

    def __len__(self) -> int:
        with self._cond:
            return len(self._events)

    def wait_for(self, predicate: Callable[[Event[Any]], bool], timeout: float,
                 *, since: int = 0) -> Event[Any] | None:
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

    def _write(self, event: Event[Any]) -> None:
        """Append ``event`` to the file (held in memory after a failed write: see ``write_error``)."""
        if self._file is None:
            return
        if self.write_error is not None:
            self._unwritten.append(event)
            return
        line = json.dumps(event.to_json(), separators=(",", ":")) + "\n"
        try:
            self._file.write(line)
            self._file.flush()
            self._whole = self._file.tell()
        except OSError as exc:
            self.write_error = exc
            self._unwritten.append(event)
            self._reopen()

    def _reopen(self) -> None:
        """After a failed write the file may end in part of a line: cut it back to its last whole line
        and reopen (the event is held in memory, written again by ``flush_unwritten``)."""
        assert self._file is not None and self.path is not None
        with contextlib.suppress(OSError):
            self._file.close()
        with contextlib.suppress(OSError):
            os.truncate(self.path, self._whole)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def flush_unwritten(self) -> int:
        """Write the events held in memory since a failed write (there is room again: the run freed its
        reserve); returns how many are still unwritten (0: the file is whole)."""
        with self._cond:
            if self._file is None or self.write_error is None:
                return len(self._unwritten)
            held, self._unwritten, self.write_error = self._unwritten, [], None
            for event in held:
                self._write(event)
            return len(self._unwritten)

    def close(self) -> None:
        with self._cond:
            if self._file is not None:
                with contextlib.suppress(OSError):
                    self._file.close()
                self._file = None

    @classmethod
    def load(cls, path: Path) -> Timeline:
        """Read a timeline file; lines that cannot be read are skipped (``read_timeline`` says which)."""
        tl = cls()
        tl._events.extend(read_timeline(path).events)
        return tl


@dataclass(frozen=True)
class LineError:
    """A line of timeline.jsonl that could not be read, and why."""

    line: int
    """1-based."""
    reason: str
    cut_off: bool = False
    """Not JSON at all, on the last line: a write the run did not finish (a crash)."""

    def describe(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass(frozen=True)
class TimelineRead:
    """A timeline file as read: its events in time order and the lines that could not be read."""

    events: list[Event[Any]] = field(default_factory=list)
    errors: list[LineError] = field(default_factory=list)

    def note(self, name: str = "timeline.jsonl") -> str | None:
        """What a report says about the unreadable lines (None when every line was read)."""
        if not self.errors:
            return None
        if len(self.errors) == 1 and self.errors[0].cut_off:
            return f"the last line of {name} was cut off mid-write (the run crashed or was killed) and was skipped"
        shown = "; ".join(e.describe() for e in self.errors[:3])
        more = f" (and {len(self.errors) - 3} more)" if len(self.errors) > 3 else ""
        return f"{len(self.errors)} line(s) of {name} could not be read and were skipped: {shown}{more}"


MAX_LINE = 1_000_000
"""Characters beyond which a line is not read (nothing the toolkit writes comes near)."""


def read_timeline(path: Path) -> TimelineRead:
    """Every event of a timeline.jsonl file, validated line by line against its type's payload
    (the one typed reader of timelines: reports, audits and ``Timeline.load`` use it). A line
    that is not an event is skipped and named; OSError when the file cannot be read."""
    events: list[Event[Any]] = []
    errors: list[LineError] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            if len(line) > MAX_LINE:
                raise ValueError(f"longer than {MAX_LINE} characters")
            raw = json.loads(line)
        except (ValueError, RecursionError) as exc:
            errors.append(LineError(i + 1, f"not JSON ({str(exc)[:80]})", cut_off=i == last))
            continue
        try:
            events.append(Event.from_json(raw))
        except (PayloadError, ValueError, RecursionError) as exc:
            errors.append(LineError(i + 1, str(exc)[:300]))
    events.sort(key=lambda e: e.t)
    return TimelineRead(events, errors)


def read_events(path: Path) -> list[Event[Any]]:
    """The events of a timeline file (unreadable lines skipped: ``read_timeline`` names them)."""
    return read_timeline(path).events


def _matcher(types: tuple[Selector, ...]) -> Callable[[Event[Any]], bool]:
    if not types:
        return lambda e: True
    exact = frozenset(t for t in types if isinstance(t, EventType))
    sources = frozenset(t.value for t in types if isinstance(t, Source))
    return lambda e: e.type.source in sources or e.type in exact


def _select(events: Iterable[Event[Any]], types: tuple[Selector, ...], node: str | None, after: float | None,
            until: float | None, where: Callable[[Any], bool] | None = None) -> Iterator[Event[Any]]:
    match = _matcher(types)
    return (e for e in events if match(e) and (node is None or e.node == node)
            and (after is None or e.t > after) and (until is None or e.t <= until) and (where is None or where(e)))


@overload
def of(events: Iterable[Event[Any]], type: EventType[P], /, *, node: str | None = None,
       after: float | None = None, until: float | None = None) -> list[Event[P]]: ...


@overload
def of(events: Iterable[Event[Any]], *types: Selector, node: str | None = None,
       after: float | None = None, until: float | None = None) -> list[Event[Any]]: ...


def of(events: Iterable[Event[Any]], *types: Selector, node: str | None = None,
       after: float | None = None, until: float | None = None) -> list[Event[Any]]:
    """The events of any of ``types`` (every event when none is given; a ``Source``
    stands for all its types), in time order (a stable sort: ties keep their order).
    ``node``: only that node's; ``after``: only later than (exclusive); ``until``:
    only up to (inclusive)."""
    return sorted(_select(events, types, node, after, until), key=lambda e: e.t)


@overload
def first(events: Iterable[Event[Any]], type: EventType[P], /, *, after: float | None = None,
          node: str | None = None, until: float | None = None,
          where: Callable[[Event[P]], bool] | None = None) -> Event[P] | None: ...


@overload
def first(events: Iterable[Event[Any]], *types: Selector, after: float | None = None, node: str | None = None,
          until: float | None = None, where: Callable[[Event[Any]], bool] | None = None) -> Event[Any] | None: ...


def first(events: Iterable[Event[Any]], *types: Selector, after: float | None = None, node: str | None = None,
          until: float | None = None, where: Callable[[Any], bool] | None = None) -> Event[Any] | None:
    """The earliest event ``of(...)`` selects for which ``where`` holds (of equal times,
    the one met first); None when there is none."""
    return min(_select(events, types, node, after, until, where), key=lambda e: e.t, default=None)


@overload
def last(events: Iterable[Event[Any]], type: EventType[P], /, *, after: float | None = None,
         node: str | None = None, until: float | None = None,
         where: Callable[[Event[P]], bool] | None = None) -> Event[P] | None: ...


@overload
def last(events: Iterable[Event[Any]], *types: Selector, after: float | None = None, node: str | None = None,
         until: float | None = None, where: Callable[[Event[Any]], bool] | None = None) -> Event[Any] | None: ...


def last(events: Iterable[Event[Any]], *types: Selector, after: float | None = None, node: str | None = None,
         until: float | None = None, where: Callable[[Any], bool] | None = None) -> Event[Any] | None:
    """The latest event ``of(...)`` selects for which ``where`` holds (of equal times,
    the one met last); None when there is none."""
    found: Event[Any] | None = None
    for e in _select(events, types, node, after, until, where):
        if found is None or e.t >= found.t:
            found = e
    return found
