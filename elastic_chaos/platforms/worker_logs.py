"""Where each worker's own output goes: files of its own, apart from its agent's log.

A node's log used to hold the torchrun agent's lines and its workers' output in one stream,
and nothing told them apart: a script printing ``ChildFailedError`` read as its agent giving
up. torchrun's ``--redirects 3 --tee 3`` (TEE_FLAGS) separates them at the source: each worker
writes its stdout and its stderr to files of its own (torch's ``DefaultLogsSpecs.reify``)::

    <log dir>/<run id>_<random>/attempt_<restart count>/<local rank>/stdout.log
                                                                    /stderr.log

and its agent copies each of their lines into its own output, within 0.1 s, with the prefix
``[<role><local rank>]:`` (torch's ``tail_log.py``; the role is ``default``). The node log stays
the one file a person reads, the agent's lines bare and the workers' prefixed; a platform that
sees the log folder offers the workers' own files (``Platform.worker_logs``), which the log
follower reads instead of the copies, timed to their own writes (elastic_chaos.watchers.logs).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Stream = Literal["stdout", "stderr"]

_TEE = {"redirects": "3", "tee": "3"}
"""torchrun's options that give every worker's stdout and stderr files of their own (3: both streams)
and copy their lines, prefixed, into the agent's own output."""
TEE_FLAGS = tuple(word for name, value in _TEE.items() for word in (f"--{name}", value))
POD_LOG_DIR = "/tmp/torchelastic"
"""The log folder of an agent in a pod (only the pod's log, with the prefixed copies, is read there)."""


def pod_tee_args(dash: str = "-") -> list[str]:
    """The same options as ``--name=value`` words, with POD_LOG_DIR as the agent's ``--log-dir``
    (``dash``: ``_`` for the spelling the ElasticJob's arguments use)."""
    return [f"--log{dash}dir={POD_LOG_DIR}", *(f"--{name}={value}" for name, value in _TEE.items())]


_STREAMS: tuple[tuple[Stream, str], ...] = (("stdout", "stdout.log"), ("stderr", "stderr.log"))
"""Each stream and the file torch writes it to."""
_TRUSTED_AFTER_S = 1.0
"""A folder's listing is reused while its mtime stays, once taken this long after that mtime (a
second change within one tick of the kernel's clock leaves the mtime as it was)."""


@dataclass(frozen=True)
class WorkerLog:
    """One stream of one worker, as torch's agent redirected it."""

    local_rank: int
    stream: Stream
    attempt: int
    """The worker group's restart count when it was started (torch's ``attempt_<N>`` folder)."""
    path: Path
    group: int = 0
    """Which worker group (its attempt folder's inode): torch reuses ``attempt_<N>``, its files removed,
    for a group restarted without spending a restart (a membership change: the count stays N)."""
    inode: int = 0
    """The file's own inode: a file made anew at the same path is another file."""


class WorkerLogFolder:
    """The worker files under one agent's ``--log-dir``, found as they appear. A look costs a
    ``stat`` per folder: a folder is listed again only when it changed (its inode or mtime), or
    changed less than _TRUSTED_AFTER_S before it was last listed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._listed: dict[str, tuple[tuple[int, int], float, dict[str, int]]] = {}
        """folder -> ((its inode, its mtime in ns), when it was listed, its entries' inodes by name)."""
        self._files: list[WorkerLog] = []
        self._relisted = True
        """Whether a folder was listed anew (or was gone) during the last look: its files are found again."""

    def files(self) -> list[WorkerLog]:
        """Every worker's stdout.log and stderr.log under the folder now, by attempt and local rank
        (empty while the agent has made none). Reads only; never raises for a folder that is gone."""
        self._relisted = False
        found: list[tuple[str, int, int, int, dict[str, int]]] = []   # a rank's folder, rank, attempt, group, files
        root = str(self.root)
        for run in self._entries(root):
            run_folder = os.path.join(root, run)
            for attempt_name, group in self._entries(run_folder).items():
                attempt = _number(attempt_name, "attempt_")
                folder = os.path.join(run_folder, attempt_name)
                for rank_name in self._entries(folder) if attempt is not None else ():
                    rank = _number(rank_name, "")
                    if rank is not None and attempt is not None:
                        own = os.path.join(folder, rank_name)
                        found.append((own, rank, attempt, group, self._entries(own)))
        if self._relisted:   # else nothing changed since the last look: its files stand
            self._files = sorted((WorkerLog(rank, stream, attempt, Path(own, file), group, names[file])
                                  for own, rank, attempt, group, names in found
                                  for stream, file in _STREAMS if file in names),
                                 key=lambda w: (w.attempt, w.local_rank, w.stream))
        return self._files

    def _entries(self, folder: str) -> dict[str, int]:
        try:
            st = os.stat(folder)
        except OSError:
            self._relisted = True
            return {}
        key = (st.st_ino, st.st_mtime_ns)
        cached = self._listed.get(folder)
        if cached is not None and cached[0] == key and cached[1] - st.st_mtime_ns / 1e9 >= _TRUSTED_AFTER_S:
            return cached[2]
        self._relisted = True
        listed = time.time()
        try:
            with os.scandir(folder) as entries:
                names = {entry.name: entry.inode() for entry in entries}
        except OSError:
            return {}
        self._listed[folder] = (key, listed, names)
        return names


def _number(name: str, prefix: str) -> int | None:
    rest = name[len(prefix):] if name.startswith(prefix) else None
    return int(rest) if rest is not None and rest.isdigit() else None
