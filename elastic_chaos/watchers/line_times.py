"""When each byte of a node log was written: the LogFollower's samples of its size, kept beside the log.

A script's plain ``print`` carries no time, and a line's neighbours may be seconds
away from it. The LogFollower samples the size of every log it follows each SAMPLE_S
(an ``fstat``: no read, no parse) and reads the new bytes ten times a second
(``FollowedLog``). Each sample that saw the log grow bounds when the bytes it added
were written: after the sample before it (they were not there then) and no later than
this one (or the file's mtime, when that is earlier: the kernel's own stamp of the
log's last write, on the clock a checkpoint's mtime is read on). A line gets
the window of its own bytes: after the last sample that did not hold its first byte, by
the first that held its end (``WriteWindows``), so the lines of one read get ordered
windows about SAMPLE_S wide. A sample that comes late (a loaded machine) widens the
windows around it; it never makes one miss its line's write.

The samples are kept in the log's index, one record per sample that saw it grow,
``OFFSET AFTER WRITTEN`` (``OFFSET``: where the sample's bytes end; ``AFTER`` is ``-``
when unknown: bytes already there at the first look), appended to ``<log>.times`` at
each read and flushed as written, so the folder of a run that crashed keeps it. At
most RECORDS_PER_S records a second on average (RECORD_BURST at once): a sample past
that budget is merged into the next record (its bytes share a wider window). The
report's excerpts read it back (``LineTimes``) to give every line of the log the window
it was written in, and to seek near a time in a 100 MB log instead of reading it from
the start. A log without an index (not under the report folder, not writable, an
older run) is read without one.
"""
from __future__ import annotations

import array
import bisect
import logging
import math
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger(__name__)

SUFFIX = ".times"
SAMPLE_S = 0.01
"""How often the follower samples a log's size: about the width of a line's window."""
RECORDS_PER_S = 100.0
"""Index records a log gets a second, on average (~4 KB/s for a log that grows at every sample)."""
RECORD_BURST = 10
"""Index records a log may get at once beyond RECORDS_PER_S (a late sampler catching up)."""
READ_MAX = 4 * 1024 * 1024
"""The most a read takes from one log: a flood is followed at up to 40 MB/s a node, never held whole."""
LINE_MAX = 64 * 1024
"""The longest line kept: a line that grows past it (300 MB without a newline) is handed on in parts of
this size, each marked with SPLIT, and never held whole."""
SPLIT = " [... the line goes on: split at 65,536 bytes]"
"""How a part of a split line ends, so no reader takes it for a whole line."""


def times_path(log_path: Path) -> Path:
    """Where the index of ``log_path`` is kept: beside it, ``<name>.times``."""
    return log_path.with_name(log_path.name + SUFFIX)


class TimesWriter:
    """Appends one log's samples to its index. A file that cannot be opened or written
    ends the index (said once, at INFO): the follower never fails over it."""

    def __init__(self, log_path: Path) -> None:
        self.path = times_path(log_path)
        self._fd: int | None = None
        try:  # unbuffered append: each record is one write(2), on disk even if we crash
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            log.info("no line-time index for %s (%s): its untimed lines are placed between timed ones",
                     log_path, exc.strerror or exc)

    def record(self, offset: int, after: float | None, written: float) -> None:
        """The bytes before ``offset`` (since the previous record) were written after ``after``
        and no later than ``written``. Times are rounded outward, to the millisecond."""
        self.records([(offset, after, written)])

    def records(self, records: Iterable[tuple[int, float | None, float]]) -> None:
        """``record`` for each of ``records`` (offset, after, written), in one write."""
        if self._fd is None:
            return
        text = "".join(f"{offset} {'-' if after is None else f'{math.floor(after * 1000) / 1000:.3f}'} "
                       f"{math.ceil(written * 1000) / 1000:.3f}\n" for offset, after, written in records)
        if not text:
            return
        try:
            os.write(self._fd, text.encode())
        except OSError as exc:
            log.info("line-time index %s stops here (%s)", self.path, exc.strerror or exc)
            self.close()

    def close(self) -> None:
        """Idempotent."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


Line = tuple[str, float | None, float]
"""A complete line of a followed log (its end left off), when it was written after (None: unknown)
and by. A plain tuple: a chatty log gives thousands a second."""

_LINE_END = re.compile(rb"\r\n|\r|\n")


class FollowedLog:
    """One log as a follower reads it: kept open (reopening every log ten times a second is most
    of a follower's cost), read from where the last read ended, its size sampled in between.
    One thread drives it; ``close()`` ends it."""

    def __init__(self, f: BinaryIO, offset: int, after: float | None, index: TimesWriter | None) -> None:
        """``f`` is read from ``offset``; the bytes past it were written after ``after`` (None: unknown)."""
        f.seek(offset)
        self._f, self._fd, self._offset, self._held = f, f.fileno(), offset, b""
        self._windows = WriteWindows(after, index)

    @property
    def looked(self) -> float | None:
        """When the log's size was last sampled: bytes it did not hold then came later (None: unknown)."""
        return self._windows.looked

    @property
    def resume_at(self) -> int:
        """Where a new reader starts to miss no line: the start of the line still without its end."""
        return self._offset - len(self._held)

    def sample(self) -> None:
        """Note the log's size now: an fstat, no read. Returns at once."""
        looked = time.time()
        st = os.fstat(self._fd)
        self._windows.sample(st.st_size, looked, st.st_mtime)

    @property
    def behind(self) -> bool:
        """Whether bytes the last sample saw are still unread (a flood read READ_MAX at a time)."""
        return self._windows.size > self._offset

    def read(self) -> list[Line]:
        """The complete lines written since the last read, at most READ_MAX bytes of them (empty ones
        skipped), each with its own window; a last line without its end is held for the next read, in
        parts of LINE_MAX when it grows past that. Writes the index's new records."""
        self.sample()
        chunk = self._f.read(READ_MAX) if self._windows.size > self._offset else b""  # an idle log: no read
        if chunk:
            self.sample()  # after the read: a sample holds every byte read
        read_at = time.time()
        self._windows.flush(read_at)
        if not chunk:
            return []
        base, buf = self.resume_at, self._held + chunk
        self._offset += len(chunk)
        lines: list[Line] = []
        pos = 0
        for m in _LINE_END.finditer(buf):  # a \r\n cut between two reads leaves an empty line: skipped
            if m.start() > pos:
                after, by = self._windows.window(base + pos, base + m.end())
                lines.append((buf[pos:m.start()].decode("utf-8", "replace"), after, read_at if by is None else by))
            pos = m.end()
        while len(buf) - pos > LINE_MAX:   # a line that never ends: handed on in parts, never held whole
            after, by = self._windows.window(base + pos, base + pos + LINE_MAX)
            lines.append((buf[pos:pos + LINE_MAX].decode("utf-8", "replace") + SPLIT, after,
                          read_at if by is None else by))
            pos += LINE_MAX
        self._held = buf[pos:]
        self._windows.forget(self.resume_at, self._offset)
        return lines

    def close(self) -> None:
        """Close the log and its index (the records it still holds written). Idempotent."""
        self._f.close()
        self._windows.close()


class WriteWindows:
    """One log's sizes as sampled, and what they say: when each of its bytes was written.
    Sample ``k`` (``_sizes[k]`` bytes) was looked at by ``_by[k]``, and at ``_after[k]`` the log
    held no more (the latest sample of that size: None when unknown). The index gets a record
    for each sample that saw the log grow, within the budget (RECORDS_PER_S)."""

    def __init__(self, after: float | None, index: TimesWriter | None) -> None:
        self._sizes: list[int] = [0]
        self._by: list[float] = [-math.inf]
        self._after: list[float | None] = [after]
        self._index = index
        self._unwritten: list[tuple[int, float | None, float]] = []
        self._merged: tuple[int, float | None, float] | None = None
        """Samples past the budget, as one record waiting for it."""
        self._tokens, self._refilled = float(RECORD_BURST), -math.inf

    @property
    def looked(self) -> float | None:
        return self._after[-1]

    @property
    def size(self) -> int:
        """The largest size sampled."""
        return self._sizes[-1]

    def sample(self, size: int, looked: float, mtime: float) -> None:
        """The log held ``size`` bytes, its mtime ``mtime``, at a look after ``looked`` and before now.
        A log that shrank (cut short) is ignored until it grows past its old size."""
        last = self._sizes[-1]
        if size == last:  # the common case, a hundred times a second: kept short
            self._after[-1] = looked
        elif size > last:
            after = self._after[-1]
            # an mtime is on the kernel's coarse clock, a tick behind ours: never before the bounds below it
            seen = max(min(time.time(), mtime), after if after is not None else mtime, self._by[-1])
            self._sizes.append(size)
            self._by.append(seen)
            self._after.append(looked)
            if self._index is not None:
                self._note(size, after, seen)

    def window(self, start: int, end: int) -> tuple[float | None, float | None]:
        """When the bytes from ``start`` up to ``end`` (exclusive) were written: after (None: unknown)
        and by (None: no sample held them yet)."""
        k = bisect.bisect_left(self._sizes, end)
        return (self._after[bisect.bisect_right(self._sizes, start) - 1],
                self._by[k] if k < len(self._sizes) else None)

    def forget(self, held: int, read: int) -> None:
        """Keep only the samples later windows need: the bytes before ``read`` have been read, the
        line from ``held`` on is still without its end."""
        i = bisect.bisect_right(self._sizes, held) - 1
        keep = [i, *range(max(i + 1, bisect.bisect_right(self._sizes, read) - 1), len(self._sizes))]
        if len(keep) < len(self._sizes):
            self._sizes = [self._sizes[k] for k in keep]
            self._by = [self._by[k] for k in keep]
            self._after = [self._after[k] for k in keep]

    def _note(self, size: int, after: float | None, by: float) -> None:
        """An index record for a sample that saw the log grow, or merged into the next one past the budget."""
        if self._merged is not None:
            after = self._merged[1]  # the merged samples' bytes: after the first one's lower bound
        self._merged = (size, after, by)
        if self._spend(by):
            self._unwritten.append(self._merged)
            self._merged = None

    def _spend(self, now: float) -> bool:
        self._tokens = min(float(RECORD_BURST), self._tokens + max(0.0, now - self._refilled) * RECORDS_PER_S)
        self._refilled = max(self._refilled, now)
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    def flush(self, now: float) -> None:
        """Write the records noted since the last flush (merged ones too once the budget allows)."""
        if self._merged is not None and self._spend(now):
            self._unwritten.append(self._merged)
            self._merged = None
        if self._unwritten and self._index is not None:
            self._index.records(self._unwritten)
        self._unwritten = []

    def close(self) -> None:
        """Write every record held and close the index. Idempotent."""
        if self._merged is not None:
            self._unwritten.append(self._merged)
            self._merged = None
        self.flush(math.inf)
        if self._index is not None:
            self._index.close()


@dataclass(frozen=True)
class Written:
    """When some bytes of a log were written: after ``after`` (None: unknown), by ``by``."""

    after: float | None
    by: float


class LineTimes:
    """A log's index as read back. Entries are kept while their offsets grow (a second
    follower over the same log adds looser ones, dropped); the bounds are made monotonic
    (a later byte cannot have been written before an earlier one), which only tightens them."""

    def __init__(self, offsets: array.array[int], after: array.array[float], by: array.array[float]) -> None:
        self._offsets, self._after, self._by = offsets, after, by

    @classmethod
    def load(cls, log_path: Path) -> LineTimes | None:
        """The index beside ``log_path``; None when there is none (or nothing readable in it)."""
        offsets, after, by = array.array("q"), array.array("d"), array.array("d")
        try:
            with open(times_path(log_path), "rb") as f:
                for raw in f:
                    entry = _entry(raw)
                    if entry is None or (offsets and entry[0] <= offsets[-1]):
                        continue  # a record cut off by a crash, or another follower's
                    offsets.append(entry[0])
                    after.append(max(entry[1], after[-1]) if after else entry[1])
                    by.append(max(entry[2], by[-1]) if by else entry[2])
        except OSError:
            return None
        return cls(offsets, after, by) if offsets else None

    @property
    def covered(self) -> int:
        """Bytes of the log the index covers (from its start)."""
        return self._offsets[-1]

    @property
    def last_after(self) -> float | None:
        """The latest lower bound known: bytes past ``covered`` were written after it."""
        return _known(self._after[-1])

    def written(self, first: int, last: int) -> Written | None:
        """When the bytes ``first``..``last`` (offsets, inclusive) were written; None when the
        index does not reach ``last``."""
        j = bisect.bisect_right(self._offsets, last)
        if j >= len(self._offsets):
            return None
        i = min(bisect.bisect_right(self._offsets, first), j)
        after = _known(self._after[i])
        return Written(after, max(self._by[j], after if after is not None else self._by[j]))

    def offset_before(self, t: float) -> int:
        """An offset before which every byte was written before ``t`` (0 when none is known)."""
        k = bisect.bisect_left(self._by, t)
        return self._offsets[k - 1] if k > 0 else 0


def _entry(raw: bytes) -> tuple[int, float, float] | None:
    parts = raw.split()
    if len(parts) != 3 or not raw.endswith(b"\n"):
        return None
    try:
        offset, by = int(parts[0]), float(parts[2])
        after = math.nan if parts[1] == b"-" else float(parts[1])
    except ValueError:
        return None
    return (offset, after, by) if math.isfinite(by) and offset > 0 else None


def _known(x: float) -> float | None:
    return None if math.isnan(x) else x
