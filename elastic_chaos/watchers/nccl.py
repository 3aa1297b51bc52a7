"""NCCL's watchdog lines in a node log: when a worker's collective failed, and when it went down.

On GPUs a failed collective does not end the worker at once. ProcessGroupNCCL's
watchdog thread notices the failure (a peer's process exited, or the collective
ran past its timeout), signals a debug dump, waits up to
``TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC`` (60 s by default) and only then takes
the process down (SIGABRT, exit code -6). Its agent sees a failed worker only
then. Telling those instants apart is what lets a recovery say "the worker took
60 s to exit after its collective failed" instead of folding the wait into the
rendezvous.

The watchdog writes through c10's logger, one line per message, each stamped
with its own time (torch >= 2.4)::

    [rank0]:[E1122 13:29:11.512345678 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 0] ...

``parse_nccl`` turns the lines that matter into events (ProgressEv.WORKER_ERROR
with ``via: nccl``, NCCL_DUMP, NCCL_TEARDOWN), stamped with that time. The
wording is torch's (ProcessGroupNCCL.cpp, 2.4 to 2.11) and NCCL's (2.2x); a line
we do not recognise is ignored, never guessed at.
"""
from __future__ import annotations

import datetime
import re

from elastic_chaos.events import Event, EventType, ProgressEv
from elastic_chaos.events.progress_events import NcclLine, WorkerError
from elastic_chaos.watchers.glog import glog_time

# c10 logging: optional "[rankN]:" prefix, then [<sev><mmdd> <hh:mm:ss.frac> [tid ]file:line] message
_C10 = re.compile(r"^(?:\[rank(?P<rank>\d+)\]:)?\[(?P<sev>[IWEF])(?P<mo>\d\d)(?P<day>\d\d) "
                  r"(?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d)\.(?P<frac>\d{6,9})(?: \d+)? "
                  r"(?P<file>[\w.]+):\d+\] ?(?P<msg>.*)$")
_PG_RANK = re.compile(r"\bRank (\d+)\]")

NCCL_CAUSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("timeout", re.compile(r"Watchdog caught collective operation timeout|ran for \d+ milliseconds before "
                           r"timing out")),
    ("connection_closed", re.compile(r"remote process exit|ncclRemoteError|Connection closed by remote peer|"
                                     r"Connection reset by peer", re.I)),
    ("watchdog_stuck", re.compile(r"watchdog got stuck|Heartbeat monitor timed out|"
                                  r"watchdog thread (?:is )?(?:stuck|hang)", re.I)),
)
"""What a watchdog line says broke the collective (the first that matches)."""

_ERRORS = re.compile(r"Watchdog caught collective operation timeout|Exception \(either an error or timeout\) "
                     r"detected by watchdog|Process group watchdog thread terminated with exception|"
                     r"watchdog got stuck|Heartbeat monitor timed out|NCCL error|ncclRemoteError")
_DUMP = re.compile(r"to signal dumping|Received a dump signal|preparing to dump debug info")
_TEARDOWN = re.compile(r"taking the entire process down|Terminating the process after attempting to dump")


def nccl_cause(message: str) -> str:
    """What a watchdog line says broke the collective: ``timeout`` (a silent peer),
    ``connection_closed`` (a peer's process exited), ``watchdog_stuck`` (the heartbeat
    monitor found the watchdog hung), ``unknown`` for the watchdog's "Exception (either
    an error or timeout) detected" (which does not say), else ``other``."""
    for cause, pattern in NCCL_CAUSES:
        if pattern.search(message):
            return cause
    return "unknown" if "either an error or timeout" in message else "other"


def parse_nccl(line: str, node: str, *, tz: datetime.tzinfo | None = None) -> Event | None:
    """A c10-logged ProcessGroupNCCL line -> a WORKER_ERROR (``via: nccl``), NCCL_DUMP or
    NCCL_TEARDOWN event stamped with the line's own time, read in ``tz`` (the zone the node
    logs in: UTC in a pod; None: this machine's); None for any other line."""
    m = _C10.match(line)
    if m is None or not m["file"].startswith("ProcessGroupNCCL") or m["sev"] == "I":
        return None
    msg = m["msg"]
    kind: EventType
    if _TEARDOWN.search(msg):
        kind = ProgressEv.NCCL_TEARDOWN
    elif _DUMP.search(msg):
        kind = ProgressEv.NCCL_DUMP
    elif _ERRORS.search(msg):
        kind = ProgressEv.WORKER_ERROR
    else:
        return None
    frac = m["frac"]
    t = glog_time(int(m["mo"]), int(m["day"]), int(m["hh"]), int(m["mi"]), int(m["ss"]), int(frac[:6]), tz=tz)
    t += int(frac[6:] or 0) / 10 ** len(frac)  # nanoseconds past the microsecond
    found = m["rank"] or (_PG_RANK.search(msg) or [None, None])[1]
    rank = None if found is None else int(found)
    if kind == ProgressEv.WORKER_ERROR:
        return Event.make(ProgressEv.WORKER_ERROR, t, node, WorkerError(
            via="nccl", message=msg[:240], rank=rank, error="NCCL watchdog", cause=nccl_cause(msg)))
    return Event.make(kind, t, node, NcclLine(via="nccl", message=msg[:240], rank=rank))
