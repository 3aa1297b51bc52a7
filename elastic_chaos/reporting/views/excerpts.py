"""Node and agent log lines around each fault, for the reader who asks "why".

A node log mixes torchrun's agent (glog lines with their own time), the workers'
``elastic_chaos.trainer.progress`` lines (JSON with the trainer's time) and lines with no time of
their own: a script's prints, tracebacks. The workers' lines are their agent's copies,
shown as the log holds them, prefixed ``[default<local rank>]:`` (torchrun ``--tee``):
a copy is never read as the agent's line (elastic_chaos.watchers.sources). A line is timed by its own stamp or,
lacking one, by the window it was written in: from the LogFollower's line-time index
beside the log (elastic_chaos.watchers.line_times), else between the stamped lines around it
(the log's mtime after the last one). Such a time is ``inferred``, and the line is in
the excerpt when its window overlaps the fault's.

The log is streamed, never held (elastic_chaos.watchers.timed_lines, with the LogFollower's own
parsers; with an index the read starts near the window). Runs of step lines are folded; when lines
must be left out, the agent's lines and errors are kept before plain ones; the killed
node's last lines before the kill and a survivor's failure (its worker's traceback
ending in a failed collective, its agent seeing the worker fail) are shown even when
the window would cut them, marked ``pulled``.
"""
from __future__ import annotations

import datetime
import itertools
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from elastic_chaos.events import AgentEv
from elastic_chaos.watchers.line_times import LineTimes
from elastic_chaos.watchers.logs import AGENT_SAW_FAILURE
from elastic_chaos.watchers.timed_lines import Item, Many, Record, read_timed, stamp

MAX_LINES = 60
"""Lines of a window shown: its first and last MAX_LINES/2, and up to MAX_LINES agent
lines and errors between them."""
BEFORE_S = 3.0
AFTER_MAX_S = 60.0
LAST_LINES = 10
"""The killed node's lines shown before the kill, inside the window or not."""
FAILURE_LINES = 60
"""A survivor's failure shown at most (its traceback, its agent's lines)."""
FAILURE_SEARCH_S = 1800.0
"""How long after the fault a survivor's failure is looked for (a collective's timeout)."""
SLACK_S = 5.0
"""Clocks of the agent and the workers may disagree a little: how far past its end the read goes on."""
BACK_BYTES = 64 * 1024
"""With an index, the read starts this far before the window (the killed node's last lines)."""


@dataclass(frozen=True)
class Line:
    t: float | None
    """When it was written: its own stamp; an inferred time is the latest it can have been written
    (``before``) or, with no timed line after it, the earliest (``after``)."""
    text: str
    level: str
    """``agent`` (torchrun), ``progress`` (a step folded), ``error``, ``expected`` (an error a survivor
    is expected to show after losing a peer: how it notices), ``plain`` or ``omitted`` (lines left out)."""
    inferred: bool = False
    """The line has no time of its own: it was written between ``after`` and ``before``."""
    after: float | None = None
    """The earliest it can have been written (inferred times; None: unknown)."""
    before: float | None = None
    """The latest it can have been written (inferred times; None: only the log's mtime bounds it)."""
    pulled: bool = False
    """Shown although its time is outside the window: the killed node's last lines, a survivor's failure."""


@dataclass(frozen=True)
class Excerpt:
    node: str
    start: float
    end: float
    lines: tuple[Line, ...]
    omitted: int
    """Lines of the window left out."""
    error: str | None = None
    """Why the log could not be read (nothing is shown then)."""
    pulled_for: str = ""
    """What the lines shown from outside the window are (the killed node's last lines, a survivor's failure)."""

    @property
    def expected_errors(self) -> bool:
        """Whether some lines are errors the fault is expected to cause (marked ``expected``)."""
        return any(ln.level == "expected" for ln in self.lines)

    @property
    def inferred(self) -> int:
        """Lines shown whose time is inferred."""
        return sum(ln.inferred for ln in self.lines)

    @property
    def pulled(self) -> int:
        """Lines shown from outside the window."""
        return sum(ln.pulled for ln in self.lines)

    def summary(self, t0: float) -> str:
        """What the excerpt shows, in words (times from ``t0``)."""
        shown = sum(ln.level != "omitted" and not ln.pulled for ln in self.lines)
        parts = [f"{shown} line(s) from +{self.start - t0:.1f}s to +{self.end - t0:.1f}s"]
        if self.omitted:
            parts.append(f"{self.omitted} line(s) omitted")
        if self.inferred:
            parts.append(f"times inferred for {self.inferred} line(s) (~: no time of their own, placed by when "
                         "the log grew)")
        if self.pulled:
            parts.append(f"{self.pulled} line(s) from outside the window ({self.pulled_for or 'shown for context'})")
        return "; ".join(parts)


EXPECTED_NOTE = ("expected: after a peer is lost, a survivor's collective fails (connection closed or reset, "
                 "or a timeout) and its agent sees the worker fail: that is how the job notices, not a bug")


def line_time(line: str, today: datetime.date | None = None, tz: datetime.tzinfo | None = None) -> float | None:
    """A line's own time: a torch agent line's glog stamp (``today``: a day in the log's span, for
    the year; ``tz``: the zone it was written in) or an elastic_chaos.trainer.progress line's; None for others."""
    return stamp(line, today, tz).t


def _line(rec: Record, pulled: bool = False) -> Line:
    if rec.stamped:
        return Line(rec.hi, rec.text, rec.level, pulled=pulled)
    before = None if rec.open_end else rec.hi
    shown = rec.lo if rec.open_end and rec.lo is not None else rec.hi
    return Line(shown, rec.text, rec.level, inferred=True, after=rec.lo, before=before, pulled=pulled)


_HALF = MAX_LINES // 2
Entry = tuple[int, int, Record]
"""(rank among the window's lines, lines it stands for, the line)."""


class _Shelf:
    """A bounded choice of lines in order: the first and last MAX_LINES/2, and up to MAX_LINES
    agent lines and errors between them."""

    def __init__(self) -> None:
        self.head: list[Entry] = []
        self.keys: list[Entry] = []
        self.tail: deque[Entry] = deque()
        self.n = 0
        """Lines put so far (a folded line counts the lines it stands for)."""

    def put(self, rec: Record, span: int = 1) -> None:
        entry = (self.n, span, rec)
        self.n += span
        if len(self.head) < _HALF:
            self.head.append(entry)
            return
        self.tail.append(entry)
        if len(self.tail) > _HALF:
            old = self.tail.popleft()
            if old[2].level != "plain" and len(self.keys) < MAX_LINES:
                self.keys.append(old)

    def entries(self) -> list[Entry]:
        return [*self.head, *self.keys, *self.tail]


class _Picker:
    """Chooses the lines of one node's excerpt as they stream by (bounded memory)."""

    def __init__(self, start: float, end: float, survivor_after: float | None, killed_at: float | None) -> None:
        self.start, self.end = start, end
        self.survivor_after, self.killed_at = survivor_after, killed_at
        self.shelf = _Shelf()
        self.fold: list[Record] = []
        self.run: _Shelf | None = None
        """Lines waiting for the next stamped line (their window ends there)."""
        self.run_lo: float | None = None
        self.run_story: list[Record] = []
        """Waiting lines of a survivor's failure, judged once their time is known."""
        self.last: deque[Record] = deque(maxlen=LAST_LINES)
        self.failure: list[Record] = []
        self.failure_state = "search" if survivor_after is not None else "done"
        """search (for the first failed collective after the fault), agent (its agent's lines), done."""
        self.search_until = end
        """A survivor's failure is looked for until then: the window's end when progress was regained in
        it (the failure came before), else a collective's timeout after the fault."""
        if survivor_after is not None and end - survivor_after >= AFTER_MAX_S:
            self.search_until = survivor_after + FAILURE_SEARCH_S
        self.expect_agent = False

    def overlaps(self, lo: float | None, hi: float | None) -> bool:
        return (lo is None or lo <= self.end) and (hi is None or hi >= self.start)

    def add(self, item: Item) -> None:
        if isinstance(item, Many):
            self._add_many(item)
            return
        rec = item
        if rec.hi is None:
            if self.run is None:
                self.run, self.run_lo = _Shelf(), rec.lo
            self.run.put(rec)
            if self.killed_at is not None:
                self._watch_last(rec)
            if (rec.failure or rec.agent is not None) and len(self.run_story) < FAILURE_LINES:
                self.run_story.append(rec)
            return
        self.settle(rec.hi)
        self._watch(rec)
        if not self.overlaps(rec.lo, rec.hi):
            return
        if rec.step is not None:
            self.fold.append(rec)
            return
        self._flush_fold()
        self.shelf.put(rec)

    def _add_many(self, many: Many) -> None:
        """Plain lines waiting for the next stamped line, only their ends kept."""
        if self.run is None:
            self.run, self.run_lo = _Shelf(), many.lo
        for rec in many.head:
            self.run.put(rec)
        self.run.n += many.count - len(many.head) - len(many.tail)
        for rec in many.tail:
            self.run.put(rec)
            if self.killed_at is not None:
                self._watch_last(rec)

    def settle(self, hi: float, *, open_end: bool = False) -> None:
        """The waiting lines were written by ``hi`` (``open_end``: the log's mtime): place them."""
        run, self.run = self.run, None
        if run is None:
            return
        for rec in itertools.chain((e[2] for e in run.entries()), self.last, self.run_story):
            if rec.hi is None:
                rec.hi, rec.open_end = hi, open_end
        for rec in self.run_story:
            self._watch_story(rec)
        self.run_story = []
        if self.overlaps(self.run_lo, hi):
            self._flush_fold()
            base = self.shelf.n
            for idx, span, rec in run.entries():
                self.shelf.n = base + idx
                self.shelf.put(rec, span)
            self.shelf.n = base + run.n

    def _watch(self, rec: Record) -> None:
        self._watch_last(rec)
        self._watch_story(rec)

    def _watch_last(self, rec: Record) -> None:
        """The killed node's last lines before the kill."""
        if self.killed_at is not None and (rec.lo is None or rec.lo <= self.killed_at):
            self.last.append(rec)

    def _watch_story(self, rec: Record) -> None:
        """A survivor's failure: its failed collective, then its agent seeing the worker fail."""
        if rec.failure:
            self._watch_failure(rec)
        elif rec.agent in AGENT_SAW_FAILURE:
            self._watch_agent(rec)
        elif rec.stamped and rec.level in ("agent", "error"):
            self.expect_agent = False  # the agent went on (stopping, rendezvous): its reaction is over
            if self.failure_state == "agent":
                self.failure_state = "done"

    def _after_fault(self, rec: Record) -> bool:
        """Whether a line may have been written between the fault and the end of the search."""
        after = self.survivor_after
        return (after is not None and rec.hi is not None and rec.hi >= after
                and (rec.lo is None or rec.lo <= self.search_until))

    def _watch_failure(self, rec: Record) -> None:
        if not self._after_fault(rec):
            return
        rec.level = "expected" if rec.level != "omitted" else rec.level
        self.expect_agent = True
        if self.failure_state in ("search", "agent") and len(self.failure) < FAILURE_LINES:
            self.failure.append(rec)
            self.failure_state = "agent"

    def _watch_agent(self, rec: Record) -> None:
        if self.expect_agent:
            rec.level = "expected"
        if not self._after_fault(rec) or self.failure_state == "done":
            return
        self.failure.append(rec)
        if rec.agent in (AgentEv.WORKER_GROUP_FAILED, AgentEv.AGENT_GAVE_UP):
            self.failure_state = "done"

    def _flush_fold(self) -> None:
        if self.fold:
            self.shelf.put(_folded(self.fold), span=len(self.fold))
            self.fold = []

    def done(self, rec: Record) -> bool:
        """Whether nothing after ``rec`` can be shown (it is timed well past all that is looked for)."""
        if rec.lo is None or rec.hi is None:
            return False
        horizon = max(self.end, self.killed_at or self.end)
        if self.failure_state != "done":
            horizon = max(horizon, self.search_until)
        return rec.lo > horizon + SLACK_S

    def lines(self) -> tuple[tuple[Line, ...], int]:
        """The lines to show, in the log's order, and how many of the window's were left out."""
        self._flush_fold()
        window = self.shelf.entries()
        seen = {rec.seq for _, _, rec in window}
        pulled = {r.seq: r for r in (*self.last, *self.failure)
                  if r.seq not in seen and r.hi is not None and not self.overlaps(r.lo, r.hi)}
        items: list[tuple[int, Entry | None]] = [(e[2].seq, e) for e in window]
        items += [(seq, None) for seq in pulled]
        out: list[Line] = []
        steps: list[Record] = []  # pulled step lines, folded as in the window
        reach = 0
        for seq, entry in sorted(items, key=lambda item: item[0]):
            if entry is None and pulled[seq].step is not None:
                steps.append(pulled[seq])
                continue
            if steps:
                out.append(_line(_folded(steps), pulled=True))
                steps = []
            if entry is None:
                out.append(_line(pulled[seq], pulled=True))
                continue
            idx, span, rec = entry
            if idx > reach:
                out.append(Line(None, f"... {idx - reach} line(s) omitted ...", "omitted"))
            out.append(_line(rec))
            reach = idx + span
        if steps:
            out.append(_line(_folded(steps), pulled=True))
        return tuple(out), self.shelf.n - sum(span for _, span, _ in window)


def _folded(fold: list[Record]) -> Record:
    steps = [r.step for r in fold if r.step is not None]
    what = f"steps {steps[0]}..{steps[-1]}" if steps else "progress lines"
    return Record.made(fold[0], f"... {len(fold)} trainer progress line(s) ({what}) ...", "progress")


def excerpt(node: str, path: Path, start: float, end: float, tz: datetime.tzinfo | None = None, *,
            survivor_after: float | None = None, killed_at: float | None = None) -> Excerpt:
    """The node's log lines whose time overlaps [start, end] (``tz``: the zone of the agents' log
    times), step lines folded, bounded in number. ``survivor_after``: the node survived a fault at that
    time, so its failure after it (its worker's traceback ending in a failed collective, its agent seeing
    the worker fail) is marked ``expected`` and shown even outside the window. ``killed_at``: the node
    was killed then, so its last lines before it are shown even outside the window. Reads the log once,
    from near ``start`` when it has a line-time index; a log that cannot be read gives an excerpt
    with no lines and ``error`` set."""
    picker = _Picker(start, end, survivor_after, killed_at)
    today = datetime.datetime.fromtimestamp(end, tz).date()
    times = LineTimes.load(path)
    try:
        with open(path, "rb") as f:
            eof = os.fstat(f.fileno()).st_mtime
            for rec in read_timed(f, _first_offset(times, start, killed_at), times, today, tz, keep=_HALF):
                picker.add(rec)
                if isinstance(rec, Record) and rec.hi is not None and picker.done(rec):
                    break
            picker.settle(eof, open_end=True)
    except OSError as exc:
        return Excerpt(node, start, end, (), 0, error=f"{path} could not be read ({exc.strerror or exc})")
    lines, omitted = picker.lines()
    why = ("its last lines before the kill" if killed_at is not None else
           "its failure after the fault: how it noticed" if survivor_after is not None else "")
    return Excerpt(node=node, start=start, end=end, lines=lines, omitted=omitted, pulled_for=why)


def _first_offset(times: LineTimes | None, start: float, killed_at: float | None) -> int:
    """Where to start reading: a little before the bytes written before the window (0 without an index)."""
    if times is None:
        return 0
    earliest = min(start, killed_at) if killed_at is not None else start
    return max(0, times.offset_before(earliest - SLACK_S) - BACK_BYTES)


def window(injected_at: float, regain_s: float | None) -> tuple[float, float]:
    """From a little before the fault to a little after progress was regained
    (at most AFTER_MAX_S when it never was)."""
    after = min(regain_s + 2.0, AFTER_MAX_S) if regain_s is not None else AFTER_MAX_S
    return injected_at - BEFORE_S, injected_at + after
