"""What a traceback says: why the agent stopped, and which error a worker died of.

Lines without a glog header carry no time of their own (each is timed by its write window,
elastic_chaos.watchers.line_times), and the words in them can be anyone's: a script may print
``ChildFailedError`` or ``OSError: [Errno 28] ...`` as plain text. So each parser here is
asked only about lines of one source (elastic_chaos.watchers.sources): ``parse_agent_raw`` about the
agent's own lines (its closing traceback, a rendezvous error), ``parse_worker_error`` about the
line that ends a traceback on a worker's stderr (``Tracebacks`` says which). ``parse_raw`` reads
a log whose sources cannot be told apart (no ``--tee``), with both, as such logs always were.
"""
from __future__ import annotations

import re

from elastic_chaos.events import AgentEv, Event, EventType, ProgressEv
from elastic_chaos.events.agent_events import AgentError
from elastic_chaos.events.progress_events import WorkerError

RANK = re.compile(r"^\[rank(?P<rank>\d+)\]: ?")
"""The prefix torch puts on a worker's stderr lines once its process group is up."""
TRACEBACK = "Traceback (most recent call last):"

# The agent's own traceback and errors: what it gave up on, a rendezvous that failed.
_AGENT_RAW: list[tuple[EventType, re.Pattern[str]]] = [
    (AgentEv.AGENT_GAVE_UP, re.compile(r"ChildFailedError")),
    (AgentEv.RENDEZVOUS_ERROR,
     re.compile(r"(?P<error>Rendezvous(?:Connection|Timeout|Closed|State)?Error: ?.{0,160})")),
    # the agent's own rank exchange through the round's store timed out (a participant lost
    # right after the round closed: elastic_chaos.analysis.barrier); workers' lines carry "[rankN]: "
    (AgentEv.RENDEZVOUS_ERROR,
     re.compile(r"^(?:torch\.distributed\.)?(?P<error>(?:LookupError: Key \S+ not found in EtcdStore|"
                r"DistStoreError: .{0,160}))")),
]

# The last line of a worker's traceback: any error once torch prefixes its stderr with its rank;
# without the prefix (a script's own traceback, before its process group) only the errors that
# name a root cause.
_WORKER_RAW: list[re.Pattern[str]] = [
    re.compile(r"^\[rank(?P<rank>\d+)\]: (?P<error>[\w.]*(?:Error|Exception)): ?(?P<message>.{0,240})"),
    re.compile(r"^(?P<error>OSError|PermissionError|FileNotFoundError|ModuleNotFoundError|MemoryError|"
               r"torch\.OutOfMemoryError|RuntimeError): ?(?P<message>.{0,240}(?:Errno|No space left|"
               r"write failed|out of memory|No module named|PytorchStreamReader failed).{0,200})"),
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


def parse_agent_raw(line: str, node: str, t: float) -> Event | None:
    """The agent event a line of the agent's own output without a glog header stands for (it gave
    up: ``ChildFailedError``; a rendezvous error); None for another line. Ask it only about the
    agent's lines: a script's print of the same words is no agent event."""
    for type, pattern in _AGENT_RAW:
        m = pattern.search(line)
        if m is None:
            continue
        if type == AgentEv.RENDEZVOUS_ERROR:
            return Event.make(AgentEv.RENDEZVOUS_ERROR, t, node, AgentError(error=m["error"]))
        return Event.make(type, t, node)
    return None


def parse_worker_error(line: str, node: str, t: float, rank: int | None = None) -> Event | None:
    """The WORKER_ERROR a worker's error line stands for (``rank``: the worker's, when the line has
    no ``[rankN]:`` of its own); None for another line. Ask it only about the line that ends a
    traceback on a worker's stderr (``Tracebacks``): a script's print of an error is no error."""
    for pattern in _WORKER_RAW:
        m = pattern.search(line)
        if m is None:
            continue
        error, message = m["error"], m["message"] or ""
        own = m.groupdict().get("rank")
        return Event.make(ProgressEv.WORKER_ERROR, t, node, WorkerError(
            error=error, message=message, rank=int(own) if own is not None else rank,
            cause=collective_cause(message), root=root_cause(error or "", message)))
    return None


def parse_raw(line: str, node: str, t: float) -> Event | None:
    """A line of a log whose sources cannot be told apart (no ``--tee``: elastic_chaos.watchers.sources),
    read as such logs always were: the agent's patterns, then a worker's error, on any line."""
    return parse_agent_raw(line, node, t) or parse_worker_error(line, node, t)


class Tracebacks:
    """One worker stream read line by line: which line ends a Python traceback (``Traceback (most
    recent call last):``, its frames, then the ``Error: message`` line; ``[rankN]:`` prefixed or not)."""

    def __init__(self) -> None:
        self._open = False

    def ends(self, line: str) -> bool:
        """Whether ``line`` is the exception line that ends a traceback begun earlier in the stream."""
        body = RANK.sub("", line, count=1)
        if body.startswith(TRACEBACK):
            self._open = True
            return False
        if not self._open or body[:1] in (" ", "\t"):   # outside a traceback, or its frames
            return False
        self._open = False   # the first line after the frames: the exception line
        return True
