"""Follow node logs: progress lines from the trainer, lifecycle lines from the agent.

Each node's log file is read incrementally (new bytes only, partial lines kept
for the next poll). A line ends at ``\n`` or ``\r``: a progress bar redraws itself
with carriage returns and may print no newline for the whole run (tqdm, Lightning).
Lines with the ``elastic_chaos.trainer.progress`` prefix become ``progress``/``checkpoint`` events
stamped with the trainer's own time; torchrun agent lines we understand become
``agent`` events stamped with the agent's own log time. Lines that carry no time
of their own (a script's, a worker's traceback) get a window of their own: the
follower samples every log's size each SAMPLE_S between its reads (every READ_S),
and a line was written after the last sample that did not hold it (its lower
bound, kept on a --progress-regex step as ``written_after``) and by the first
that did (its time), whichever read gives it to us. The samples are kept in the
log's line-time index beside it (elastic_chaos.watchers.line_times), which the report's
excerpts read back. A script may log in the agent's own glog format (absl-style
``I0501 12:00:00.123456 4242 train.py:88] ...``): only lines from torch's own
files are the agent's. The parsers here are the only ones: the excerpts
(elastic_chaos.watchers.timed_lines) use them.

Each line is read as its source's, settled before it is parsed (elastic_chaos.watchers.sources):
the agent's own lines (a node log's lines without a worker's copy prefix) give the agent
events; a worker's lines (its own files where the platform offers them, else its agent's
prefixed copies) give progress, regex steps, NCCL lines and, from the end of a traceback
on its stderr, its error (elastic_chaos.watchers.tracebacks).
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic_chaos.events import (
    AgentEv,
    CheckpointEv,
    Event,
    EventType,
    PayloadError,
    ProgressEv,
    RunnerEv,
    Source,
    Timeline,
    declared,
    field_value,
)
from elastic_chaos.events.agent_events import RoundResult
from elastic_chaos.events.progress_events import Unparsed
from elastic_chaos.events.runner_events import ClockOffset
from elastic_chaos.watchers.api import Watcher
from elastic_chaos.watchers.clocks import NodeClock
from elastic_chaos.watchers.glog import GLOG, glog_stamp
from elastic_chaos.watchers.glog import glog_time as glog_time  # read from here too (tests)
from elastic_chaos.watchers.line_times import SAMPLE_S, SPLIT, FollowedLog, TimesWriter
from elastic_chaos.watchers.nccl import parse_nccl
from elastic_chaos.watchers.script_lines import ScriptLines
from elastic_chaos.watchers.sources import Files, Worker, WorkerFiles, tee_split
from elastic_chaos.watchers.tracebacks import (
    Tracebacks,
    parse_agent_raw,
    parse_raw,
    parse_worker_error,
)
from elastic_chaos.watchers.tracebacks import collective_cause as collective_cause  # read from here too (tests)
from elastic_chaos.watchers.tracebacks import root_cause as root_cause

log = logging.getLogger(__name__)

PREFIX = "ELASTIC_CHAOS "  # elastic_chaos.trainer.progress.PREFIX; chaos does not import elastic_chaos.trainer

READ_S = 0.1
"""How often the follower's thread reads the logs' new bytes (it samples their sizes every SAMPLE_S)."""
_TORCH_SOURCE = re.compile(r"(?:^|[\s/\\])torch[/\\]")


def from_torch(line: str) -> bool:
    """Whether a glog-format line was written by torch's own code (the agent, the launcher),
    not by a script that logs in the same format: its ``path:line]`` is under ``torch/``."""
    return _TORCH_SOURCE.search(line.split("]", 1)[0]) is not None

_AGENT_PATTERNS: list[tuple[EventType, re.Pattern[str]]] = [
    (AgentEv.WORKER_FAILED, re.compile(r"failed \(exitcode: (?P<exitcode>-?\d+)\) local_rank: (?P<local_rank>\d+) "
                                       r"\(pid: (?P<pid>\d+)\)")),
    (AgentEv.WORKER_GROUP_FAILED, re.compile(r"Worker group FAILED\. (?P<attempts_left>\d+)/(?P<max_restarts>\d+) "
                                             r"attempts left")),
    (AgentEv.MEMBERSHIP_CHANGE, re.compile(r"Detected (?P<new_nodes>\d+) new nodes")),
    (AgentEv.RENDEZVOUS_STARTED, re.compile(r"Rendezvous'ing worker group")),
    (AgentEv.RENDEZVOUS_COMPLETE, re.compile(r"Rendezvous complete for workers")),
    (AgentEv.WORKERS_STARTING, re.compile(r"Starting worker group")),
    (AgentEv.WORKERS_STOPPING, re.compile(r"Stopping worker group")),
    (AgentEv.WORKERS_FINISHED, re.compile(r"worker group successfully finished")),
    (AgentEv.SIGNAL_RECEIVED, re.compile(r"Received (?P<signal>\w+) death signal")),
    (AgentEv.RENDEZVOUS_CLOSED, re.compile(r"RendezvousClosedError|rendezvous '.*' is closed", re.I)),
    (AgentEv.RENDEZVOUS_TIMEOUT, re.compile(r"RendezvousTimeoutError")),
    (AgentEv.CLOSING_WORKER, re.compile(r"Sending process (?P<pid>\d+) closing signal (?P<signal>\w+)")),
    (AgentEv.WORKER_KILL_FORCED, re.compile(r"Unable to shutdown process (?P<pid>\d+) via (?P<signal>[\w.]+), "
                                            r"forcefully exiting via (?P<kill_signal>[\w.]+)")),
]


def agent_match(message: str) -> tuple[EventType, re.Match[str]] | None:
    """The agent event a torch glog line's message stands for, with its match; None for the others."""
    for type, pattern in _AGENT_PATTERNS:
        hit = pattern.search(message)
        if hit:
            return type, hit
    return None


AGENT_SAW_FAILURE = frozenset({AgentEv.WORKER_FAILED, AgentEv.WORKER_GROUP_FAILED, AgentEv.AGENT_GAVE_UP})
"""The agent's lines that say a worker failed: how a survivor's agent reacts to its collective's failure."""

# the result block's "  key=value" lines (master_addr, local_ranks, ... sit between the ones we keep)
_RESULT_FIELD = re.compile(r"^\s+(\w+)=(.*?)\s*$")
_RESULT_KEPT = ("restart_count", "group_rank", "group_world_size")

# elastic_chaos.trainer.progress's checkpoint_* names; every other "ev" name ("step", "start",
# "finished", a script's own) is the progress event of that kind
_CHECKPOINT_TYPES: dict[str, EventType] = {
    "checkpoint_started": CheckpointEv.STARTED, "checkpoint_saved": CheckpointEv.SAVED,
    "checkpoint_loaded": CheckpointEv.LOADED, "checkpoint_corrupt": CheckpointEv.CORRUPT,
    "checkpoint_removed": CheckpointEv.REMOVED}


def read_progress(line: str, node: str) -> Event | None:
    """An elastic_chaos.trainer.progress line -> a progress or checkpoint Event; None for any other line.
    Raises PayloadError for a line whose fields do not have the types its event declares."""
    at = line.find(PREFIX)
    if at < 0:
        return None
    try:
        record: dict[str, Any] = json.loads(line[at + len(PREFIX):])
        ev = str(record.pop("ev"))
        t = float(record.pop("t"))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    if ev == "step":
        _loss_as_data(record)
    return Event.make(_CHECKPOINT_TYPES.get(ev) or declared(Source.PROGRESS.value, ev), t, node, record)


def _loss_as_data(record: dict[str, Any]) -> None:
    """A diverged script's loss -- NaN or infinite, which Python's json writes and reads -- is the script's data,
    not a malformed line: the step is kept (steps and samples are what the verdict counts), its loss recorded as
    null (the timeline stays JSON) and what it was as ``loss_not_finite`` (``nan``, ``inf``, ``-inf``)."""
    loss = record.get("loss")
    if isinstance(loss, float) and not math.isfinite(loss):
        record["loss"] = None
        record["loss_not_finite"] = str(loss)


def parse_progress(line: str, node: str) -> Event | None:
    """``read_progress``, with a line whose fields are of the wrong type read as no event."""
    try:
        return read_progress(line, node)
    except PayloadError:
        return None


@dataclass
class _AgentParser:
    """Per-node state: the agent prints its rendezvous result over several lines."""

    node: str
    tz: datetime.tzinfo | None = None
    """The zone the agent writes its times in (None: local time)."""
    pending: dict[str, Any] | None = None
    pending_t: float = 0.0
    pending_ranks: list[int] = field(default_factory=list)
    ranks: dict[int | None, list[int]] = field(default_factory=dict)
    """Each round's global ranks by local rank (its result's ``global_ranks``), by restart count (None: the last)."""
    out: list[Event] = field(default_factory=list)

    def feed(self, line: str) -> list[Event]:
        m = GLOG.match(line)
        t = glog_stamp(m, tz=self.tz) if m else None
        if m is None or t is None:
            return []
        msg = m[9]
        events: list[Event] = []
        if self.pending is not None:
            f = _RESULT_FIELD.match(msg)
            if f:
                if f[1] in _RESULT_KEPT and f[2].isdigit():
                    self.pending[f[1]] = int(f[2])
                elif f[1] == "global_ranks":
                    self.pending_ranks = [int(r) for r in re.findall(r"\d+", f[2])]
                return []
            events.append(Event.make(AgentEv.RENDEZVOUS_COMPLETE, self.pending_t, self.node,
                                     RoundResult.read(self.pending)))
            self.ranks[self.pending.get("restart_count")] = self.ranks[None] = self.pending_ranks
            self.pending, self.pending_ranks = None, []
        found = agent_match(msg)
        if found is not None:
            type, hit = found
            data = {k: (int(v) if v.lstrip("-").isdigit() else v) for k, v in hit.groupdict().items()}
            if type == AgentEv.RENDEZVOUS_COMPLETE:
                self.pending, self.pending_t = data, t
            else:
                try:
                    events.append(Event.make(type, t, self.node, data))
                except PayloadError as exc:  # a torch whose wording we misread: say so, keep following
                    log.warning("%s: an agent line was not read: %s", self.node, exc)
        return events

    def rank_of(self, worker: Worker) -> int | None:
        """A worker's global rank in the round that started it (None: that round's result was not read)."""
        ranks = self.ranks.get(worker.attempt)
        return ranks[worker.local_rank] if ranks is not None and worker.local_rank < len(ranks) else None


class LogFollower(Watcher):
    """Follows every node log the platform reports (new nodes are picked up as they appear).
    Its thread samples the open logs' sizes every SAMPLE_S and reads them every READ_S; a
    ``poll()`` called directly reads at once.

    Beside each log under ``index`` (True: the folder of the timeline's file, when it has one;
    False: none) it keeps the log's line-time index (elastic_chaos.watchers.line_times): when each
    sample's bytes were written, so a report can time a line that has no time of its own.

    Each line is read as its source's (elastic_chaos.watchers.sources): a node log's bare lines as its
    agent's, the workers' lines as theirs. ``worker_logs`` (the platform's ``worker_logs``): the
    workers' own files, followed and timed as the node logs are, their copies in a node log skipped."""

    interval_s = SAMPLE_S

    def __init__(self, timeline: Timeline, logs: Callable[[], dict[str, Path]],
                 script: ScriptLines | None = None, *, tz: datetime.tzinfo | None = None,
                 index: Path | bool = True, worker_logs: Files | None = None) -> None:
        super().__init__(timeline)
        self._logs = logs
        self._workers = WorkerFiles(worker_logs) if worker_logs is not None else None
        self._teed: set[str] = set()
        """Nodes whose log has shown a worker's copy: its other lines are its agent's own."""
        self._split_copy: dict[str, int] = {}
        """Node -> the local rank of a worker's copy split at LINE_MAX: its next part is the same worker's."""
        self._tracebacks: dict[tuple[Any, ...], Tracebacks] = {}
        self._index_under = (timeline.path.parent if index is True and timeline.path is not None
                             else index if isinstance(index, Path) else None)
        """Logs under this folder get a line-time index (None: no log does)."""
        self._followed: dict[str, FollowedLog] = {}
        self._resume: dict[str, int] = {}
        """Where a log closed by finish() is read from again."""
        self._missed: dict[str, float] = {}
        """When a read found no log yet: its bytes were all written later."""
        self._tz = tz
        """The zone of the agents' log times (the platform's node_log_timezone)."""
        self._script = script if script is not None and script.active else None
        """A user script's own lines as progress (--progress-regex/--resume-regex)."""
        self._agents: dict[str, _AgentParser] = {}
        self._last_raw: dict[tuple[Any, ...], float] = {}
        self._clocks: dict[str, NodeClock] = {}
        """Each node's clock against the runner's, from its stamped lines (elastic_chaos.watchers.clocks)."""
        self._unreadable: set[tuple[str, str]] = set()
        """(node, event) whose elastic_chaos.trainer.progress line was said to be unreadable (once each)."""
        self._read_until = 0.0
        self._paced = False

    def start(self) -> None:
        self._paced = True  # the thread samples between its reads
        super().start()

    def poll(self) -> None:
        """Read every node log's new lines onto the timeline. Called directly it returns then; in
        the watcher's thread it then samples the open logs' sizes every SAMPLE_S until the next
        read is due (READ_S after this one), and returns within SAMPLE_S of ``stop()`` (a sleep
        between samples costs less CPU than the watcher's wait on its stop event)."""
        began, wall = time.monotonic(), time.time()
        if self._workers is not None:
            self._workers.look()
        whole = True
        for node, path in self._logs().items():
            opened = self._open(node, path)
            for line, after, by in opened.read() if opened is not None else ():
                self._handle(node, line, by, after)
            whole = whole and (opened is None or not opened.behind)
        if self._workers is not None:   # after the node logs: a round's result comes before its workers' lines
            for node, file, (line, after, by) in self._workers.read():
                self._worker_line(node, Worker(file.local_rank, file.stream, file.attempt, file.group), line, by, after)
            whole = whole and not self._workers.behind
        if whole:   # a log still behind (a flood, read READ_MAX at a time) holds read_until back
            self._read_until = wall
        while self._paced and not self._stop.is_set() and time.monotonic() + SAMPLE_S < began + READ_S:
            time.sleep(SAMPLE_S)
            self.sample()

    def sample(self) -> None:
        """Note the open logs' sizes now (an fstat each: no read): the lines they hold past the
        last sample get this moment as their upper bound, the lines after them as their lower one.
        The started follower's thread does it every SAMPLE_S; call it only on one not started."""
        for followed in self._followed.values():
            followed.sample()
        if self._workers is not None:
            self._workers.sample()

    @property
    def read_until(self) -> float:
        """Every line written to a node log before this time has been read and is on the
        timeline (the start of the last complete read; 0 before the first)."""
        return self._read_until

    def looked(self, node: str) -> float | None:
        """When ``node``'s log was last sampled (what it did not hold then was written later); None
        while it is not open."""
        followed = self._followed.get(node)
        return followed.looked if followed is not None else None

    def _open(self, node: str, path: Path) -> FollowedLog | None:
        """The node's log, kept open, with its index; None while it does not exist."""
        followed = self._followed.get(node)
        if followed is None:
            looked = time.time()
            try:
                f = open(path, "rb")  # noqa: SIM115 - closed in finish()
            except FileNotFoundError:
                self._missed[node] = looked
                return None
            at = self._resume.pop(node, 0)
            followed = self._followed[node] = FollowedLog(
                f, at, self._missed.pop(node, None) if at == 0 else None,
                TimesWriter(path) if self._indexed(path) else None)
        return followed

    def _indexed(self, path: Path) -> bool:
        under = self._index_under
        return under is not None and path.resolve().is_relative_to(under.resolve())

    def finish(self) -> None:
        for node, followed in self._followed.items():
            self._resume[node] = followed.resume_at
            followed.close()
        self._followed.clear()
        if self._workers is not None:
            self._workers.finish()

    def _handle(self, node: str, line: str, written: float, after: float | None = None) -> None:
        """One line of ``node``'s log; ``written``: the latest it can have been written;
        ``after``: when the follower looked and it was not there yet (None: unknown). A worker's
        copy is skipped where its own file is read; the other lines are the agent's, once the log
        has shown a copy (before that, or in a log that never does, they may be anyone's)."""
        rank = self._split_copy.pop(node, None)
        copy = (rank, line) if rank is not None else tee_split(line)
        if copy is not None and line.endswith(SPLIT):
            self._split_copy[node] = copy[0]
        own_files = self._workers is not None and self._workers.offered
        if copy is not None:
            self._teed.add(node)
            if not own_files:   # a pod's log: the copy is all there is of the worker's line
                self._worker_line(node, Worker(copy[0]), copy[1], written, after)
        elif own_files or node in self._teed:
            self._agent_line(node, line, written, after)
        else:
            self._mixed_line(node, line, written, after)

    def _agent_line(self, node: str, line: str, written: float, after: float | None) -> None:
        """A line of the agent's own: its glog lines, its traceback; never progress or a worker's error."""
        if self._agent_events(node, line, written, after) or GLOG.match(line) is not None:
            return
        self._add_raw(parse_agent_raw(line, node, written))

    def _worker_line(self, node: str, worker: Worker, line: str, written: float, after: float | None) -> None:
        """A line a worker printed: its elastic_chaos.trainer.progress reports, an NCCL watchdog's line, the script's
        own lines (its regexes), and the error that ends a traceback on its stderr; never an agent event."""
        key = (node, worker.local_rank, worker.group, worker.stream)
        ends = worker.stream != "stdout" and self._tracebacks.setdefault(key, Tracebacks()).ends(line)
        if self._progress(node, line, written, after):
            return
        glog = GLOG.match(line) is not None   # torch's own logging in the worker, or a script's absl-style
        if (glog and from_torch(line)) or (not glog and self._nccl(node, line, written, after)):
            return
        if self._script is not None:  # the script's own line, in whatever format it logs
            own = self._script.feed(node, line, written, written_after=after, worker=worker)
            if own is not None:
                self.timeline.add(own)
                return
        if ends:
            parser = self._agents.get(node)
            self._add_raw(parse_worker_error(line, node, written, parser.rank_of(worker) if parser else None))

    def _mixed_line(self, node: str, line: str, written: float, after: float | None) -> None:
        """A line of a log whose sources cannot be told apart (no ``--tee``): read as both, as before."""
        if self._progress(node, line, written, after) or self._agent_events(node, line, written, after):
            return
        glog = GLOG.match(line) is not None
        if (glog and from_torch(line)) or (not glog and self._nccl(node, line, written, after)):
            return
        if self._script is not None:  # the script's own line, in whatever format it logs
            own = self._script.feed(node, line, written, written_after=after)
            if own is not None:
                self.timeline.add(own)
                return
        if not glog:
            self._add_raw(parse_raw(line, node, written))

    def _progress(self, node: str, line: str, written: float, after: float | None) -> bool:
        """Whether ``line`` is an elastic_chaos.trainer.progress line (its event added, or its fault said once)."""
        try:
            event = read_progress(line, node)
        except PayloadError as exc:   # a script's own fields of the wrong type: said once, not a watcher's death
            self._say_unreadable(node, line, exc)
            return True
        if event is not None:
            self.timeline.add(self._on_runner_clock(event, after, written))
        return event is not None

    def _agent_events(self, node: str, line: str, written: float, after: float | None) -> list[Event]:
        """The agent events of one of its glog lines, added (and told to the script's reader)."""
        parser = self._agents.setdefault(node, _AgentParser(node, self._tz))
        parsed = [self._on_runner_clock(ev, after, written) for ev in parser.feed(line)]
        for ev in parsed:
            self.timeline.add(ev)
            if self._script is not None:
                self._script.agent_event(ev)
        return parsed

    def _nccl(self, node: str, line: str, written: float, after: float | None) -> bool:
        """Whether ``line`` is an NCCL watchdog line we read (added once per burst), stamped with its own time."""
        nccl = parse_nccl(line, node, tz=self._tz)
        if nccl is None:
            return False
        nccl = self._on_runner_clock(nccl, after, written)
        if self._first_of_its_kind(nccl):
            self.timeline.add(nccl)
        return True

    def _add_raw(self, raw: Event | None) -> None:
        if raw is not None and self._first_of_its_kind(raw):
            self.timeline.add(raw)

    def _on_runner_clock(self, event: Event, after: float | None, by: float) -> Event:
        """``event``, stamped by its node's clock, placed on the runner's (elastic_chaos.watchers.clocks); the
        line it came from was written in [after, by]."""
        node = event.node or ""
        clock = self._clocks.setdefault(node, NodeClock())
        if clock.observe(event.t, after, by):
            self.timeline.emit(RunnerEv.CLOCK_OFFSET, node, ClockOffset(
                offset_s=round(clock.applied, 3), lower_s=_finite(clock.lower), upper_s=_finite(clock.upper)))
        return event if not clock.applied else dataclasses.replace(event, t=clock.place(event.t))

    def _say_unreadable(self, node: str, line: str, exc: PayloadError) -> None:
        what = str(exc).split(":", 1)[0]
        if (node, what) in self._unreadable:
            return
        self._unreadable.add((node, what))
        log.warning("%s: an elastic_chaos.trainer.progress line was not read: %s", node, exc)
        self.timeline.emit(ProgressEv.UNPARSED, node, Unparsed(
            option="elastic_chaos.trainer.progress", line=line[:200],
            why=f"an elastic_chaos.trainer.progress line of {what} was not read (the same on later lines is not "
                f"said again): {exc}"))

    def _first_of_its_kind(self, event: Event) -> bool:
        # a traceback repeats its error on several lines; keep one per node and burst
        key = (event.node, event.type, field_value(event.data, "rank"))
        last = self._last_raw.get(key, 0.0)
        self._last_raw[key] = event.t
        return event.t - last > 2.0


def _finite(v: float) -> float | None:
    return round(v, 3) if math.isfinite(v) else None
