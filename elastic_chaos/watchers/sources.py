"""Whose line it is: the torchrun agent's, or a worker's (what the user's script printed).

A script can print anything, the agent's words included: ``ChildFailedError``, a glog line
naming ``torch/distributed/...``, ``RendezvousClosedError``, an ``OSError: [Errno 28]``. So the
source of a line is settled before it is parsed, never guessed from its text. The agent runs
its workers with ``--redirects 3 --tee 3`` (elastic_chaos.platforms.worker_logs): each worker's stdout
and stderr go to files of their own, and the agent copies each of their lines into the node
log with torch's prefix ``[<role><local rank>]:``. So:

- a node log's line without that prefix is the agent's own (its glog lines, its traceback);
- a prefixed line is a worker's copy: where the platform offers the workers' own files
  (``WorkerFiles``) the copy is skipped and the file is read instead, each line timed to its
  own write; where it does not (a pod's log), the copy is the worker's line, prefix stripped;
- a node log that never shows the prefix (a job started without ``--tee``, a log recorded before
  it) cannot be told apart: it is read as one stream, as it always was.

A worker's error is the line that ends a traceback on its stderr (elastic_chaos.watchers.tracebacks),
never a line that merely reads like one.
"""
from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from elastic_chaos.platforms.worker_logs import Stream, WorkerLog
from elastic_chaos.watchers.line_times import FollowedLog, Line

TEE = re.compile(r"^\[(?!rank\d+\])[A-Za-z_]\w*?(?P<local_rank>\d+)\]:")
"""The prefix torch's agent puts on the lines it copies from a worker's files (``[default0]:``;
tail_log.py). Not torch's own ``[rank0]:`` on a worker's stderr lines."""


@dataclass(frozen=True)
class Worker:
    """Which worker wrote a line: its local rank; its stream, attempt and group when its own file
    was read (None: a copy in the node log, which says none of them)."""

    local_rank: int
    stream: Stream | None = None
    attempt: int | None = None
    """Its group's restart count (torch's ``attempt_<N>``)."""
    group: int | None = None
    """Which group it is (WorkerLog.group): a group restarted by a membership change has the same attempt."""


def tee_split(line: str) -> tuple[int, str] | None:
    """(local rank, the worker's line) of a line the agent copied from a worker; None for another line."""
    m = TEE.match(line)
    return (int(m["local_rank"]), line[m.end():]) if m else None


def without_tee(line: str) -> str:
    """``line`` without the agent's copy prefix (itself when it has none)."""
    m = TEE.match(line)
    return line[m.end():] if m else line


Files = Callable[[], dict[str, list[WorkerLog]] | None]
"""What a platform offers: each node's workers' own files (None: none are readable here)."""


FileKey = tuple[Path, int]
"""A worker file: its path and inode (torch makes a reused attempt's files anew)."""


class WorkerFiles:
    """The workers' own files a platform offers, each followed as a node log is (kept open, its
    size sampled between reads, each line with its own write window). A file that is no longer
    its node's newest group's (an older attempt's, or one made anew at its path when torch reused
    its folder) is closed once read to its end: those workers are gone. A file is kept open until
    then, so its inode is not given to another while it is followed. One thread drives it."""

    def __init__(self, offered: Files) -> None:
        self._offered = offered
        self._listed: dict[str, list[WorkerLog]] | None = None
        self._followed: dict[FileKey, tuple[str, WorkerLog, FollowedLog]] = {}
        self._finished: dict[FileKey, bool] = {}
        """Followed files no longer their node's newest group's, at the last look -> whether still listed."""
        self._resume: dict[FileKey, int] = {}
        self._done: set[FileKey] = set()
        self._last_look: float | None = None
        """When the files were last listed: a file first listed after it was made after it."""

    def look(self) -> bool:
        """List the files now (a platform that offers none: False). Returns at once."""
        looked = time.time()
        self._listed = self._offered()
        self._finished = {}
        for node, logs in (self._listed or {}).items():
            newest = max((log.attempt for log in logs), default=0)
            at_path = {log.path: log.inode for log in logs}
            for key, (owner, log, _) in self._followed.items():
                if owner == node and (log.attempt < newest or at_path.get(log.path, log.inode) != log.inode):
                    self._finished[key] = at_path.get(log.path) == log.inode
            for log in logs:
                self._open(node, log)
        self._last_look = looked
        return self._listed is not None

    @property
    def offered(self) -> bool:
        """Whether the platform offered the workers' files at the last look (for every node: their
        copies in the node logs are then skipped)."""
        return self._listed is not None

    def _open(self, node: str, log: WorkerLog) -> None:
        key = (log.path, log.inode)
        if key in self._followed or key in self._done:
            return
        try:
            f = open(log.path, "rb")  # noqa: SIM115 - closed in finish() or once read to its end
        except OSError:
            return
        if os.fstat(f.fileno()).st_ino != log.inode:   # made anew since it was listed: the next look opens it
            f.close()
            return
        at = self._resume.pop(key, 0)
        self._followed[key] = (node, log, FollowedLog(f, at, self._last_look if at == 0 else None, None))

    def read(self) -> Iterator[tuple[str, WorkerLog, Line]]:
        """Each followed file's new lines, file by file (attempt, local rank, stream order)."""
        for key, (node, log, followed) in list(self._followed.items()):
            for line in followed.read():
                yield node, log, line
            if key in self._finished and not followed.behind:
                followed.close()
                del self._followed[key]
                if self._finished[key]:   # an older attempt's, still there: never opened again
                    self._done.add(key)

    def sample(self) -> None:
        """Note every followed file's size now (an fstat each)."""
        for _, _, followed in self._followed.values():
            followed.sample()

    @property
    def behind(self) -> bool:
        """Whether a file holds bytes a sample saw that are still unread."""
        return any(followed.behind for _, _, followed in self._followed.values())

    def finish(self) -> None:
        """Close every file; a later ``look`` reads each on from where this left it. Idempotent."""
        for key, (_, _, followed) in self._followed.items():
            self._resume[key] = followed.resume_at
            followed.close()
        self._followed.clear()
