"""Watch an unmodified script's checkpoint file (or directory) for replacements.

A script that does not report its saves still leaves them on the shared
volume. Each poll stats the watched path (a file, or every file under a
directory, temporary files skipped); a file whose signature (inode, mtime,
size) changed and then held still for one poll is a complete save, and
becomes a ``checkpoint/saved`` event shaped like ``trainer.progress``'s:
``step``, ``path``, ``reason`` ("observed") plus ``via: "file"``, inode and
size. Its time is the file's mtime (when the data was written, not when we
looked); its ``step`` is the latest progress step seen at that time, marked
``step_from: "progress"``, because a file does not say which step it holds.
A rename into place (the atomic save) and an in-place rewrite both count;
one that lands twice within a poll is seen once. Files present when the
watch starts are the baseline, not saves.

A file behind the storage layer (chaos.platforms.storage) is read through ``view``:
the folder reached without the mount, so a poll never waits on an op a storage
fault holds; events still name the path the job wrote.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from chaos.events import CheckpointEv, ProgressEv, Timeline, last
from chaos.events.checkpoint_events import Save
from chaos.watchers.api import Watcher

Signature = tuple[int, int, int]  # inode, mtime_ns, size
_TEMP_SUFFIXES = (".tmp", ".temp", ".partial", ".part", "~", ".swp", ".lock")
MAX_FILES = 2000
SLACK_S = 0.15
"""A regex step is stamped when its line is read (one follower poll late): a save
this close after it still belongs to it."""


def is_temporary(name: str) -> bool:
    """Names writers use for a save in progress (hidden files, *.tmp, ...)."""
    low = name.lower()
    return low.startswith(".") or low.endswith(_TEMP_SUFFIXES) or ".tmp" in low


def scan(path: Path) -> dict[Path, Signature]:
    """The watched file's signature, or every non-temporary file's under a directory."""
    out: dict[Path, Signature] = {}
    try:
        st = path.stat()
    except OSError:
        return out
    if not path.is_dir():
        return {path: (st.st_ino, st.st_mtime_ns, st.st_size)}
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if is_temporary(name):
                continue
            p = Path(root) / name
            try:
                s = p.stat()
            except OSError:
                continue  # pruned between listing and stat
            out[p] = (s.st_ino, s.st_mtime_ns, s.st_size)
            if len(out) >= MAX_FILES:
                return out
    return out


class CheckpointWatcher(Watcher):
    """Turns replacements of ``path`` into ``checkpoint/saved`` events."""

    interval_s = 0.2

    def __init__(self, timeline: Timeline, path: Path, *,
                 step_at: Callable[[float], int | None] | None = None,
                 view: Callable[[Path], Path] | None = None) -> None:
        super().__init__(timeline)
        self.path = path
        self.view = view
        """Where to read ``path`` from (the storage layer's direct view); None: ``path`` itself."""
        self.step_at = step_at or self._latest_step
        self.saves = 0
        self._known: dict[Path, Signature] | None = None
        self._pending: dict[Path, Signature] = {}

    def poll(self) -> None:
        seen = self._scan()
        if self._known is None:  # the baseline: what was there before the job wrote anything
            self._known = seen
            return
        for p, sig in seen.items():
            if self._known.get(p) == sig:
                self._pending.pop(p, None)
            elif self._pending.get(p) == sig:  # changed, then held still for a poll: complete
                del self._pending[p]
                self._known[p] = sig
                self._emit(p, sig)
            else:
                self._pending[p] = sig
        for gone in set(self._known) - set(seen):
            del self._known[gone]

    def _scan(self) -> dict[Path, Signature]:
        """``scan`` of the path, read through the view, keyed by the paths the job wrote."""
        where = self.view(self.path) if self.view is not None else self.path
        if where == self.path:
            return scan(self.path)
        return {self.path / p.relative_to(where) if p != where else self.path: sig
                for p, sig in scan(where).items()}

    def _emit(self, p: Path, sig: Signature) -> None:
        t = sig[1] / 1e9
        step = self.step_at(t)
        self.saves += 1
        self.timeline.emit(CheckpointEv.SAVED, None, Save(
            path=str(p), reason="observed", via="file", inode=sig[0], size=sig[2], step=step,
            step_from="progress" if step is not None else None), t=t)

    def _latest_step(self, t: float) -> int | None:
        latest = last(self.timeline.events(), ProgressEv.STEP, until=t + SLACK_S)
        return latest.data.step if latest is not None else None
