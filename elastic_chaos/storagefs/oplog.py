"""The storage mount's operation log: one JSON line per interesting operation.

Interesting, not every request: a file opened for writing (``create``/``open``),
its handle's totals when it is flushed (``close()``) and released, every
``fsync``/``fsyncdir``, ``rename``, ``unlink``, ``mkdir``/``rmdir``, ``setattr``,
every op a rule failed or made wait, every pause of a crash point and its end,
and every rule set, cleared or expired. A 64 MB ``torch.save`` is a handful of
lines, not 16 000.

Each line carries ``t`` (wall-clock start, seconds since the epoch), ``dur``
(seconds until the reply, injected waits included), ``op``, ``path`` (inside the
mount), ``pid``/``tid`` of the caller, and where they apply ``fh`` (the handle,
never reused within a mount), ``bytes``, ``stalled_s`` (time a rule held it),
``rule``, ``error`` (an errno name) with ``injected``. Each op's ``stalled_s`` is
its own, counted once: reads and writes are summed into their handle's
``release`` line, any other op a rule held gets a line of its own, so the sum
over the log is the time stalled on storage. :func:`saves` turns the
lines into save timings (create of a file to the rename that publishes it), the
figures a run reports as save duration p50/p95/max and time stalled on storage.
"""
from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TextIO

log = logging.getLogger(__name__)


class OpLog:
    """The daemon's writer: thread-safe, one flushed line per record, never raises into the
    data path (a log that cannot be written is said once on stderr)."""

    def __init__(self, path: Path) -> None:
        self._file: TextIO | None = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()
        self._failed = False

    def write(self, **record: Any) -> None:
        line = json.dumps({k: v for k, v in record.items() if v is not None}, separators=(",", ":"))
        with self._lock:
            if self._file is None:
                return
            try:
                self._file.write(line + "\n")
            except (OSError, ValueError) as exc:
                if not self._failed:
                    self._failed = True
                    log.error("the op log cannot be written (%s); later records are lost", exc)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


@dataclass(frozen=True)
class OpRecord:
    """One line of the log, as the controller reads it."""

    t: float
    op: str
    dur: float = 0.0
    path: str | None = None
    dst: str | None = None
    pid: int | None = None
    tid: int | None = None
    node: str | None = None
    """The job's node of the caller (its ELASTIC_CHAOS_NODE_NAME), where it has one."""
    fh: int | None = None
    bytes: int | None = None
    writes: int | None = None
    stalled_s: float | None = None
    rule: str | None = None
    error: str | None = None
    injected: bool | None = None
    point: str | None = None
    pause: int | None = None
    outcome: str | None = None
    detail: str | None = None

    @property
    def end(self) -> float:
        return self.t + self.dur


_FIELDS = {f.name for f in fields(OpRecord)}


def read_ops(path: Path) -> list[OpRecord]:
    """Every complete line of the log at ``path`` ([] while there is none). A line being
    written (no newline yet) is left for the next read."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    records = []
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        try:
            raw = json.loads(line)
            records.append(OpRecord(**{k: v for k, v in raw.items() if k in _FIELDS}))
        except (ValueError, TypeError) as exc:
            log.warning("skipping a malformed op log line in %s: %s", path, exc)
    return records


@dataclass(frozen=True)
class Save:
    """One file written and published: from its create (or open for writing) to the rename
    that put it in place, or to its release when it was never renamed."""

    path: str
    final: str | None
    """Where the rename put it (None: not renamed)."""
    pid: int | None
    node: str | None
    """The job's node that wrote it."""
    start: float
    end: float
    bytes: int
    stalled_s: float
    """Time rules held the save's ops (latency, throttle, hang, a pause)."""
    error: str | None
    """The first error one of its ops got (injected or not)."""

    @property
    def duration_s(self) -> float:
        return self.end - self.start


def saves(records: Iterable[OpRecord]) -> list[Save]:
    """The saves in ``records`` (in the order they started). A file still open at the end of
    the log is not a save yet and is left out."""
    recs = sorted(records, key=lambda r: r.t)
    out = []
    for i, opened in enumerate(recs):
        if opened.op not in ("create", "open") or opened.fh is None or opened.error:
            continue
        release = next((r for r in recs[i + 1:] if r.op == "release" and r.fh == opened.fh), None)
        if release is None:
            continue
        rename = next((r for r in recs[i + 1:] if r.op == "rename" and r.path == opened.path and r.t >= opened.t
                       and not r.error), None)
        last = rename or release
        mine = [r for r in recs[i:] if r.t <= last.end and (r.fh == opened.fh or r is rename
                                                             or (r.op == "fsync" and r.path == opened.path))]
        out.append(Save(path=opened.path or "", final=rename.dst if rename else None, pid=opened.pid,
                        node=opened.node,
                        start=opened.t, end=max(r.end for r in mine), bytes=release.bytes or 0,
                        stalled_s=sum(r.stalled_s or 0.0 for r in mine),
                        error=next((r.error for r in mine if r.error), None)))
    return out


@dataclass(frozen=True)
class SaveStats:
    count: int
    p50_s: float
    p95_s: float
    max_s: float
    stalled_s: float
    """Time every op of the log spent held by a rule, saves or not."""


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in [0, 100]) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def save_stats(records: list[OpRecord]) -> SaveStats | None:
    """p50/p95/max of the saves' durations and the time stalled on storage; None without a save."""
    durations = [s.duration_s for s in saves(records)]
    if not durations:
        return None
    stalled = sum(r.stalled_s or 0.0 for r in records)
    return SaveStats(len(durations), percentile(durations, 50), percentile(durations, 95), max(durations), stalled)
