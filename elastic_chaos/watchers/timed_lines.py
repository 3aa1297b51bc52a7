"""A node log read back line by line, each line with the window in which it was written.

What the LogFollower does live (elastic_chaos.watchers.logs), done again on a finished log,
for the report's excerpts: a torch agent line is timed by its glog stamp and a
``elastic_chaos.trainer.progress`` line by its JSON time (the same parsers); any other line (a
script's print, a traceback) by the log's line-time index (elastic_chaos.watchers.line_times),
else only from below, by the last stamp before it, until the next stamped line closes
its window (``Record.hi`` is None until then: the reader of the records settles it).
Tracebacks come whole (bounded), marked ``failure`` when they end in a failed collective,
as does an NCCL watchdog's error line. Without an index a log is read at the speed of
its bytes: runs of plain lines come as one ``Many`` (their ends only), so a 100 MB log
of a script's own output takes a second, in a few MB.
"""
from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from elastic_chaos.events import AgentEv, EventType, ProgressEv
from elastic_chaos.watchers.glog import GLOG, glog_stamp
from elastic_chaos.watchers.line_times import LineTimes
from elastic_chaos.watchers.logs import PREFIX, agent_match, from_torch, parse_progress
from elastic_chaos.watchers.nccl import parse_nccl
from elastic_chaos.watchers.sources import tee_split, without_tee
from elastic_chaos.watchers.tracebacks import (
    RANK,
    collective_failed,
    exception_line,
    parse_agent_raw,
    parse_worker_error,
)

LINE_CHARS = 400
"""Characters of a line kept."""
TRACEBACK_LINES = 60
"""Lines of one traceback kept: its first and its last (where the error is)."""
CHUNK = 1 << 20
"""Bytes read at a time when a log is streamed."""
TEXT_BYTES = 4096
"""Bytes of one line kept (the rest of a longer line is skipped, not held in memory)."""


@dataclass(frozen=True)
class Stamp:
    """What a line's own stamp says: its time (None: it has none), and what kind of line it is."""

    t: float | None
    level: str = "plain"
    """``agent`` or ``error`` (a torch agent line, by its severity), ``progress`` or ``plain``."""
    agent: EventType | None = None
    """The agent event the line stands for (elastic_chaos.watchers.logs.agent_match)."""
    step: int | None = None
    """The step of an elastic_chaos.trainer.progress step line."""


def stamp(text: str, today: datetime.date | None = None, tz: datetime.tzinfo | None = None) -> Stamp:
    """A line's own stamp: a torch agent line's glog time (``today``: a day in the log's span, for
    the year; ``tz``: the zone it was written in) or an elastic_chaos.trainer.progress line's. A script's line in
    glog format is not the agent's and has no stamp here."""
    m = GLOG.match(text) if text[:1] in "IWEF" else None
    if m is not None and from_torch(text):
        found = agent_match(m[9])
        return Stamp(glog_stamp(m, today, tz), "error" if text[0] in "EF" else "agent", found[0] if found else None)
    ev = parse_progress(text, "") if PREFIX in text else None
    if ev is not None:
        return Stamp(ev.t, "progress", step=ev.data.step if ev.type == ProgressEv.STEP else None)
    return Stamp(None)


class Record:
    """One line as read. Mutable on purpose: a line's window closes (``hi``) when the next stamped
    line is read, and what it is (``level``) may be known only once its traceback has ended."""

    __slots__ = ("seq", "head", "cut", "plain", "_text", "level", "lo", "hi", "stamped", "agent", "step",
                 "failure", "open_end")

    def __init__(self, seq: int, head: bytes, cut: bool, lo: float | None, hi: float | None,
                 plain: bool = True) -> None:
        self.seq, self.head, self.cut, self.lo, self.hi, self.plain = seq, head, cut, lo, hi, plain
        """``seq``: its place among the lines read; ``[lo, hi]``: when it was written (None: unbounded
        below; not known yet above); ``plain``: its bytes rule out a stamp, an error and an NCCL line."""
        self._text: str | None = None
        self.level = "plain"
        self.stamped = self.failure = self.open_end = False
        """``failure``: a line of a failed collective (a traceback ending in one, an NCCL watchdog's
        error); ``open_end``: no timed line follows, ``hi`` is the log's mtime (a copy's is the copy's)."""
        self.agent: EventType | None = None
        self.step: int | None = None

    @classmethod
    def made(cls, like: Record, text: str, level: str) -> Record:
        """A line of ours standing for some of the log's (``like``: the first of them)."""
        rec = cls(like.seq, b"", False, like.lo, like.hi, plain=False)
        rec._text, rec.level, rec.stamped, rec.open_end = text, level, like.stamped, like.open_end
        return rec

    @property
    def text(self) -> str:
        """The line, decoded when first asked (most lines of a big log never are), at most LINE_CHARS."""
        if self._text is None:
            text = self.head.decode("utf-8", "replace")
            self._text = text[:LINE_CHARS] + " …" if self.cut or len(text) > LINE_CHARS else text
        return self._text


@dataclass(frozen=True)
class Many:
    """Plain lines in a row with no time (a log without an index): all written after ``lo`` and by
    the next stamped line; ``count`` of them, the first and last as records."""

    lo: float | None
    count: int
    head: tuple[Record, ...]
    tail: tuple[Record, ...]


Item = Record | Many

_PREFIX = PREFIX.encode()
_TRACEBACK = "Traceback (most recent call last)"
_MARKS = (_PREFIX, b"Error", b"Exception", b"ProcessGroupNCCL", _TRACEBACK.encode())
_GLOG_AT = (re.compile(rb"\n[IWEF]\d{4} "), re.compile(rb"\r[IWEF]\d{4} "))  # one literal each: fast


def read_timed(f: BinaryIO, offset: int, times: LineTimes | None, today: datetime.date,
               tz: datetime.tzinfo | None, keep: int = 30) -> Iterator[Item]:
    """The lines of ``f`` from ``offset`` (see the module), tracebacks whole; without ``times``,
    runs of more than 2 x ``keep`` plain lines as one Many. Streams: bounded memory."""
    return _classified(_records(f, offset, times, today, tz, keep), tz)


def _plain(head: bytes) -> bool:
    """Whether a line's bytes rule out a stamp, an error and an NCCL line (most of a script's output)."""
    if head[:1] in b"IWEF" and head[1:5].isdigit():
        return False
    return not any(mark in head for mark in _MARKS)


def _marks(buf: bytes) -> Iterator[tuple[int, int]]:
    """Where lines may be more than plain; after a traceback's start, the lines that can be its frames."""
    if buf[:1] in b"IWEF" and buf[1:5].isdigit():
        yield 0, 0
    for pattern in _GLOG_AT:
        for m in pattern.finditer(buf):
            yield m.end() - 1, 0
    for mark in _MARKS:
        after = 2 * TRACEBACK_LINES if mark == _MARKS[-1] else 0
        at = buf.find(mark)
        while at >= 0:
            yield at, after
            at = buf.find(mark, at + len(mark))


def _records(f: BinaryIO, offset: int, times: LineTimes | None, today: datetime.date,
             tz: datetime.tzinfo | None, keep: int) -> Iterator[Item]:
    floor = times.last_after if times is not None else None  # bytes past the index came after this
    covered = times.covered if times is not None else 0
    seq = 0
    for item in log_lines(f, offset, None if times is not None else _marks, keep=keep):
        if isinstance(item, Quiet):
            yield _many(item, seq, floor)
            seq += item.count
            continue
        first, last, head = item
        rec = Record(seq, head, len(head) < last - first, floor, None, _plain(head))
        seq += 1
        if not rec.plain:
            s = stamp(rec.text, today, tz)
            if s.t is not None:
                floor = s.t if floor is None else max(floor, s.t)  # later lines were written after it
                rec.lo = rec.hi = s.t
                rec.stamped, rec.level, rec.agent, rec.step = True, s.level, s.agent, s.step
                yield rec
                continue
        if last < covered and times is not None and (w := times.written(first, last)) is not None:
            rec.lo, rec.hi = w.after, w.by
        yield rec


def _many(quiet: Quiet, seq: int, floor: float | None) -> Many:
    tail_seq = seq + quiet.count - len(quiet.tail)
    return Many(floor, quiet.count,
                tuple(Record(seq + k, h, len(h) < b - a, floor, None) for k, (a, b, h) in enumerate(quiet.head)),
                tuple(Record(tail_seq + k, h, len(h) < b - a, floor, None) for k, (a, b, h) in enumerate(quiet.tail)))


def _classified(items: Iterable[Item], tz: datetime.tzinfo | None) -> Iterator[Item]:
    """Untimed lines' levels, tracebacks kept whole (bounded)."""
    block: list[Record] = []
    closed = False
    for rec in items:
        if isinstance(rec, Many) or (rec.plain and not block):
            yield from _block(block)
            block = []
            yield rec
            continue
        if block:
            part, closed = _traceback_part(rec, closed)
            if part:
                block.append(rec)
                continue
            yield from _block(block)
            block = []
        if not rec.stamped and _TRACEBACK in rec.text:
            block, closed = [rec], False
            continue
        if not rec.stamped:
            _classify(rec, tz)
        yield rec
    yield from _block(block)


def _traceback_part(rec: Record, closed: bool) -> tuple[bool, bool]:
    """Whether a line goes on a traceback, and whether the traceback's exception line has been seen."""
    if rec.stamped:
        return False, closed
    body = RANK.sub("", without_tee(rec.text), count=1)
    if body[:1] in (" ", "\t") or body.lstrip().startswith(("Traceback (most", "During handling",
                                                           "The above exception")):
        return True, False
    if not closed and not body.startswith("["):  # the exception line ends a traceback
        return True, True
    return False, closed


def _block(block: list[Record]) -> Iterator[Record]:
    """A traceback's lines, ``failure`` when it ends in a failed collective, its middle left out."""
    failed = any((exc := exception_line(without_tee(r.text))) is not None and collective_failed(*exc) for r in block)
    for r in block:
        r.level, r.failure = "error", failed
    if len(block) > TRACEBACK_LINES:  # its start and its end say what happened
        keep = TRACEBACK_LINES // 6
        gap = Record.made(block[keep], f"... {len(block) - TRACEBACK_LINES} line(s) of this traceback left out ...",
                          "omitted")
        gap.failure = failed
        block = [*block[:keep], gap, *block[len(block) - (TRACEBACK_LINES - keep):]]
    yield from block


def _classify(rec: Record, tz: datetime.tzinfo | None) -> None:
    """An untimed line outside a traceback: an NCCL watchdog's error, another error, the agent giving
    up (only a line of the agent's own: a worker's copy is never the agent's, elastic_chaos.watchers.sources)."""
    copy = tee_split(rec.text)
    text = copy[1] if copy is not None else rec.text
    if text.startswith("[rank") and parse_nccl(text, "", tz=tz) is not None:
        rec.level, rec.failure = "error", True
    elif "Error" in text or "Exception" in text:
        agent = parse_agent_raw(text, "", 0.0) if copy is None else None
        error = agent is not None or parse_worker_error(text, "", 0.0) is not None
        rec.level = "error" if error or exception_line(text) is not None else "plain"
        if agent is not None and agent.type == AgentEv.AGENT_GAVE_UP:
            rec.agent = AgentEv.AGENT_GAVE_UP


# -- a log streamed in bounded memory ----------------------------------------------------------

RawLine = tuple[int, int, bytes]
"""One line of a log as streamed: its bytes span ``first``..``last`` (inclusive, its end counted
when it has one), and its first TEXT_BYTES bytes. A plain tuple: a 100 MB log has millions."""

Marks = Callable[[bytes], Iterable[tuple[int, int]]]
"""Where in a stretch of lines something is worth a look: (offset in it, lines after that one
to give one by one too)."""


@dataclass(frozen=True)
class Quiet:
    """Lines in a row none of which holds a mark: ``count`` of them (empty ones counted), the
    first and last of them given (``head``, ``tail``), the rest only counted."""

    count: int
    head: tuple[RawLine, ...]
    tail: tuple[RawLine, ...]


_END = re.compile(rb"\r\n|\r|\n")


def log_lines(f: BinaryIO, offset: int = 0, marks: Marks | None = None, keep: int = 30) -> Iterator[RawLine | Quiet]:
    """The lines of ``f`` from ``offset`` (moved forward to the start of a line), streamed in
    bounded memory. A line ends at ``\\n`` or ``\\r`` (a progress bar redraws with ``\\r``); empty
    lines are skipped; a last line without its end is given as it is; a line longer than CHUNK
    is read as several. With ``marks``, more than 2 x ``keep`` lines in a row with no mark come as
    one ``Quiet`` (a 100 MB log is mostly a script's own output, read at the speed of bytes)."""
    for base, buf in _stretches(f, _line_start(f, offset)):
        if marks is None:
            yield from _split(buf, base)
        else:
            yield from _sort_out(buf, base, marks(buf), keep)


def _stretches(f: BinaryIO, at: int) -> Iterator[tuple[int, bytes]]:
    """``f`` from ``at`` in pieces of about CHUNK bytes, each ending at a line's end (the last at EOF)."""
    carry = b""
    while chunk := f.read(CHUNK):
        buf = carry + chunk
        # a \r as the last byte may be the first of a \r\n: the line ends in the next chunk
        cut = max(buf.rfind(b"\n"), buf.rfind(b"\r", 0, len(buf) - 1)) + 1 or (len(buf) if len(buf) >= CHUNK else 0)
        if cut:
            yield at, buf[:cut]
            at += cut
        carry = buf[cut:]
    if carry:
        yield at, carry


def _split(buf: bytes, base: int) -> Iterator[RawLine]:
    pos = 0
    for m in _END.finditer(buf):
        if m.start() > pos:
            yield base + pos, base + m.end() - 1, buf[pos:min(m.start(), pos + TEXT_BYTES)]
        pos = m.end()
    if pos < len(buf):
        yield base + pos, base + len(buf) - 1, buf[pos:pos + TEXT_BYTES]


def _sort_out(buf: bytes, base: int, marks: Iterable[tuple[int, int]], keep: int) -> Iterator[RawLine | Quiet]:
    """The lines of ``buf``: those around a mark one by one, the others as Quiet runs."""
    pos = 0
    for start, stop in _marked_spans(buf, marks):
        if start > pos:
            yield from _quiet(buf[pos:start], base + pos, keep)
        yield from _split(buf[start:stop], base + start)
        pos = max(pos, stop)
    if pos < len(buf):
        yield from _quiet(buf[pos:], base + pos, keep)


def _marked_spans(buf: bytes, marks: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Whole lines around each mark (and the lines after it that it asks for), merged, in order."""
    spans: list[tuple[int, int]] = []
    for at, after in sorted(marks):
        nl = buf.rfind(b"\n", 0, at)
        start = max(nl, buf.rfind(b"\r", nl + 1, at)) + 1
        stop = at
        for _ in range(after + 1):
            stop = _line_end(buf, stop)
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(stop, spans[-1][1]))
        else:
            spans.append((start, stop))
    return spans


def _line_end(buf: bytes, at: int) -> int:
    """Where the line holding ``at`` ends (after its terminator), or the end of ``buf``."""
    nl = buf.find(b"\n", at)
    cr = buf.find(b"\r", at, nl if nl >= 0 else len(buf))  # bounded: a log may hold no \r at all
    end = cr if cr >= 0 else nl
    if end < 0:
        return len(buf)
    return end + (2 if buf[end:end + 2] == b"\r\n" else 1)


def _quiet(buf: bytes, base: int, keep: int) -> Iterator[RawLine | Quiet]:
    """Lines with no mark: as a Quiet when there are many (only their ends split), else one by one."""
    count = buf.count(b"\n") + buf.count(b"\r") - buf.count(b"\r\n") + (buf[-1:] not in (b"\n", b"\r"))
    head_end = _nth_end(buf, keep)
    tail_start = _back(buf, keep + 1)
    if count <= 2 * keep + 2 or tail_start <= head_end:
        yield from _split(buf, base)
        return
    tail = tuple(_split(buf[tail_start:], base + tail_start))[-keep:]
    head = tuple(_split(buf[:head_end], base))
    yield Quiet(count, head, tail)


def _nth_end(buf: bytes, n: int) -> int:
    """Where the ``n``-th line of ``buf`` ends (after its terminator)."""
    at = 0
    for _ in range(n):
        at = _line_end(buf, at)
    return at


def _back(buf: bytes, n: int) -> int:
    """The start of a line at least ``n`` lines before the end of ``buf`` (0 when there are fewer)."""
    at = len(buf) - 1
    for _ in range(n):
        at = buf.rfind(b"\n", 0, at)
        if at < 0:
            return 0
    return at + 1


def _line_start(f: BinaryIO, offset: int) -> int:
    """``offset``, or the start of the next line when ``offset`` falls inside one; f is left there."""
    if offset <= 0:
        f.seek(0)
        return 0
    f.seek(offset - 1)
    pos = offset - 1
    while chunk := f.read(64 * 1024):
        cut = min((i for i in (chunk.find(b"\n"), chunk.find(b"\r")) if i >= 0), default=-1)
        if cut >= 0:
            f.seek(pos + cut + 1)
            return pos + cut + 1
        pos += len(chunk)
    return pos
