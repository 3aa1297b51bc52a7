"""One timeline of everything observed during a run, appended to JSONL as it happens.

Every watcher, fault and the runner itself add Events to a single Timeline.
Each event is written (and flushed) the moment it is added, so a run that
crashes still leaves its evidence on disk. Times are wall-clock seconds
(``time.time()``) stamped as close to the source as possible: the trainer
stamps its own steps, a fault stamps the instant it hit.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

Source = Literal["fault", "rendezvous", "agent", "progress", "checkpoint", "node", "runner"]
SOURCES: tuple[str, ...] = ("fault", "rendezvous", "agent", "progress", "checkpoint", "node", "runner")


@dataclass(frozen=True)
class Event:
    t: float
    source: str
    kind: str
    node: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"t": round(self.t, 6), "source": self.source, "kind": self.kind,
                "node": self.node, "data": self.data}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Event:
        return cls(t=float(raw["t"]), source=str(raw["source"]), kind=str(raw["kind"]),
                   node=raw.get("node"), data=dict(raw.get("data") or {}))


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

    def emit(self, source: str, kind: str, node: str | None = None, *,
             t: float | None = None, **data: Any) -> Event:
        return self.add(Event(t=time.time() if t is None else t, source=source,
                              kind=kind, node=node, data=data))

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
