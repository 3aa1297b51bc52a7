"""Follow node logs: progress lines from the trainer, lifecycle lines from the agent.

Each node's log file is read incrementally (new bytes only, partial lines kept
for the next poll). A line ends at ``\n`` or ``\r``: a progress bar redraws itself
with carriage returns and may print no newline for the whole run (tqdm, Lightning).
Lines with the ``trainer.progress`` prefix become ``progress``/``checkpoint`` events
stamped with the trainer's own time; torchrun agent lines we understand become
``agent`` events stamped with the agent's own log time. Lines that carry no time
of their own (a script's, a worker's traceback) get a window of their own: the
follower samples every log's size each SAMPLE_S between its reads (every READ_S),
and a line was written after the last sample that did not hold it (its lower
bound, kept on a --progress-regex step as ``written_after``) and by the first
that did (its time), whichever read gives it to us. The samples are kept in the
log's line-time index beside it (chaos.watchers.line_times), which the report's
excerpts read back. A script may log in the agent's own glog format (absl-style
``I0501 12:00:00.123456 4242 train.py:88] ...``): only lines from torch's own
files are the agent's. The parsers here are the only ones: the excerpts
(chaos.watchers.timed_lines) use them.
"""
from __future__ import annotations

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

from chaos.events import (
    AgentEv,
    CheckpointEv,
    Event,
    EventType,
    PayloadError,
    ProgressEv,
    Source,
    Timeline,
    declared,
    field_value,
)
from chaos.events.agent_events import AgentError, RoundResult
from chaos.events.progress_events import Unparsed, WorkerError
from chaos.watchers.api import Watcher
from chaos.watchers.glog import GLOG, glog_stamp
from chaos.watchers.glog import glog_time as glog_time  # read from here too (tests)
from chaos.watchers.line_times import SAMPLE_S, FollowedLog, TimesWriter
from chaos.watchers.nccl import parse_nccl
from chaos.watchers.script_lines import ScriptLines

log = logging.getLogger(__name__)

PREFIX = "ELASTIC_CHAOS "  # trainer.progress.PREFIX; chaos does not import trainer

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

# Lines without a glog header: tracebacks of the agent and of workers ("[rank0]: ...").
# They carry no time of their own; they are stamped when read (within one poll).
_RAW_PATTERNS: list[tuple[EventType, re.Pattern[str]]] = [
    (AgentEv.AGENT_GAVE_UP, re.compile(r"ChildFailedError")),
    (AgentEv.RENDEZVOUS_ERROR,
     re.compile(r"(?P<error>Rendezvous(?:Connection|Timeout|Closed|State)?Error: ?.{0,160})")),
    # the agent's own rank exchange through the round's store timed out (a participant lost
    # right after the round closed: chaos.analysis.barrier); workers' lines carry "[rankN]: "
    (AgentEv.RENDEZVOUS_ERROR,
     re.compile(r"^(?:torch\.distributed\.)?(?P<error>(?:LookupError: Key \S+ not found in EtcdStore|"
                r"DistStoreError: .{0,160}))")),
    (ProgressEv.WORKER_ERROR,
     re.compile(r"^\[rank(?P<rank>\d+)\]: (?P<error>[\w.]*(?:Error|Exception)): ?(?P<message>.{0,240})")),
    # a script's own traceback (no rank prefix): only the errors that name a root cause
    (ProgressEv.WORKER_ERROR,
     re.compile(r"^(?P<error>OSError|PermissionError|FileNotFoundError|ModuleNotFoundError|MemoryError|"
                r"torch\.OutOfMemoryError|RuntimeError): ?(?P<message>.{0,240}(?:Errno|No space left|"
                r"write failed|out of memory|No module named|PytorchStreamReader failed).{0,200})")),
]

# What a worker's error says about why it failed, beyond a collective: the cause a
# person has to fix (a full disk, a permission, a missing file or module, memory).
_ROOT_CAUSES: list[tuple[str, re.Pattern[str]]] = [
    ("disk_full", re.compile(r"Errno 28\]|No space left on device|ENOSPC|(?:file )?write failed", re.I)),
    ("permission_denied", re.compile(r"Errno 13\]|Permission denied|EACCES|PermissionError", re.I)),
    ("missing_file", re.compile(r"Errno 2\]|No such file or directory|FileNotFoundError|ENOENT")),
    ("missing_module", re.compile(r"ModuleNotFoundError|No module named")),
    ("out_of_memory", re.compile(r"out of memory|MemoryError|OutOfMemoryError|ENOMEM|Errno 12\]", re.I)),
    # torch.load of a file half written, or written by two nodes at once (a shared path)
    ("corrupt_checkpoint", re.compile(r"PytorchStreamReader failed|checkpoint file is corrupted|unpickling stack "
                                      r"underflow|pickle data was truncated|invalid load key")),
]


def root_cause(error: str, message: str) -> str | None:
    """disk_full, permission_denied, missing_file, missing_module, out_of_memory or
    corrupt_checkpoint when a worker's error names one of them; None for anything else."""
    text = f"{error}: {message}"
    return next((cause for cause, pattern in _ROOT_CAUSES if pattern.search(text)), None)


def collective_cause(message: str) -> str:
    """What broke a collective: ``timeout`` (a silent peer), ``connection_closed``
    (the kernel answered for a dead peer), or ``other``."""
    low = message.lower()
    if "timed out" in low or "timeout" in low:
        return "timeout"
    if "connection closed" in low or "connection reset" in low or "broken pipe" in low \
            or "remote process exit" in low:
        return "connection_closed"
    return "other"


_EXCEPTION = re.compile(r"^(?:\[rank\d+\]: ?)?(?P<error>[\w.]*(?:Error|Exception)): ?(?P<message>.{0,240})")
# what a worker's exception says when its collective failed, beyond collective_cause's wording:
# the backend's own errors (gloo's "Read error", NCCL's, a process group's)
_COLLECTIVE = re.compile(r"Read error|Broken pipe|NCCL|ProcessGroup|DistNetworkError|DistBackendError|gloo", re.I)


def exception_line(line: str) -> tuple[str, str] | None:
    """(error, message) of a traceback's last line (``[rankN]: `` prefixed or not); None for another line."""
    m = _EXCEPTION.match(line)
    return (m["error"], m["message"]) if m else None


def collective_failed(error: str, message: str) -> bool:
    """Whether a worker's exception says a collective failed (a peer closed the connection, a
    timeout, the backend's error): how a survivor notices that a peer is gone."""
    return collective_cause(message) != "other" or _COLLECTIVE.search(f"{error}: {message}") is not None


def parse_raw(line: str, node: str, t: float) -> Event | None:
    for type, pattern in _RAW_PATTERNS:
        m = pattern.search(line)
        if m is None:
            continue
        error = m.groupdict().get("error")
        if type == ProgressEv.WORKER_ERROR:
            message = m.groupdict().get("message") or ""
            rank = m.groupdict().get("rank")
            return Event.make(ProgressEv.WORKER_ERROR, t, node, WorkerError(
                error=error, message=message, rank=None if rank is None else int(rank),
                cause=collective_cause(message), root=root_cause(error or "", message)))
        if type == AgentEv.RENDEZVOUS_ERROR:
            return Event.make(AgentEv.RENDEZVOUS_ERROR, t, node, AgentError(error=error))
        return Event.make(type, t, node)
    return None

# trainer.progress's checkpoint_* names; every other "ev" name ("step", "start",
# "finished", a script's own) is the progress event of that kind
_CHECKPOINT_TYPES: dict[str, EventType] = {
    "checkpoint_started": CheckpointEv.STARTED, "checkpoint_saved": CheckpointEv.SAVED,
    "checkpoint_loaded": CheckpointEv.LOADED, "checkpoint_corrupt": CheckpointEv.CORRUPT,
    "checkpoint_removed": CheckpointEv.REMOVED}


def read_progress(line: str, node: str) -> Event | None:
    """A trainer.progress line -> a progress or checkpoint Event; None for any other line.
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
                return []
            events.append(Event.make(AgentEv.RENDEZVOUS_COMPLETE, self.pending_t, self.node,
                                     RoundResult.read(self.pending)))
            self.pending = None
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


class LogFollower(Watcher):
    """Follows every node log the platform reports (new nodes are picked up as they appear).
    Its thread samples the open logs' sizes every SAMPLE_S and reads them every READ_S; a
    ``poll()`` called directly reads at once.

    Beside each log under ``index`` (True: the folder of the timeline's file, when it has one;
    False: none) it keeps the log's line-time index (chaos.watchers.line_times): when each
    sample's bytes were written, so a report can time a line that has no time of its own."""

    interval_s = SAMPLE_S

    def __init__(self, timeline: Timeline, logs: Callable[[], dict[str, Path]],
                 script: ScriptLines | None = None, *, tz: datetime.tzinfo | None = None,
                 index: Path | bool = True) -> None:
        super().__init__(timeline)
        self._logs = logs
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
        self._unreadable: set[tuple[str, str]] = set()
        """(node, event) whose trainer.progress line was said to be unreadable (once each)."""
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
        for node, path in self._logs().items():
            opened = self._open(node, path)
            for line, after, by in opened.read() if opened is not None else ():
                self._handle(node, line, by, after)
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

    def _handle(self, node: str, line: str, written: float, after: float | None = None) -> None:
        """One line of ``node``'s log; ``written``: the latest it can have been written;
        ``after``: when the follower looked and it was not there yet (None: unknown)."""
        try:
            event = read_progress(line, node)
        except PayloadError as exc:   # a script's own fields of the wrong type: said once, not a watcher's death
            self._say_unreadable(node, line, exc)
            return
        if event is not None:
            self.timeline.add(event)
            return
        parser = self._agents.setdefault(node, _AgentParser(node, self._tz))
        parsed = parser.feed(line)
        for ev in parsed:
            self.timeline.add(ev)
            if self._script is not None:
                self._script.agent_event(ev)
        glog = GLOG.match(line) is not None
        if parsed or (glog and from_torch(line)):
            return
        if not glog:
            nccl = parse_nccl(line, node, tz=self._tz)  # stamped with the watchdog's own time
            if nccl is not None:
                if self._first_of_its_kind(nccl):
                    self.timeline.add(nccl)
                return
        if self._script is not None:  # the script's own line, in whatever format it logs
            own = self._script.feed(node, line, written, written_after=after)
            if own is not None:
                self.timeline.add(own)
                return
        raw = None if glog else parse_raw(line, node, written)
        if raw is not None and self._first_of_its_kind(raw):
            self.timeline.add(raw)

    def _say_unreadable(self, node: str, line: str, exc: PayloadError) -> None:
        what = str(exc).split(":", 1)[0]
        if (node, what) in self._unreadable:
            return
        self._unreadable.add((node, what))
        log.warning("%s: a trainer.progress line was not read: %s", node, exc)
        self.timeline.emit(ProgressEv.UNPARSED, node, Unparsed(
            option="trainer.progress", line=line[:200],
            why=f"a trainer.progress line of {what} was not read (the same on later lines is not said again): {exc}"))

    def _first_of_its_kind(self, event: Event) -> bool:
        # a traceback repeats its error on several lines; keep one per node and burst
        key = (event.node, event.type, field_value(event.data, "rank"))
        last = self._last_raw.get(key, 0.0)
        self._last_raw[key] = event.t
        return event.t - last > 2.0
