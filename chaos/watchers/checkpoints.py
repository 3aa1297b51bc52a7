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
watch starts are the baseline, not saves. On node-local disks each node's
folder is watched, and a save there is that node's.

A file behind the storage layer (chaos.platforms.storage) is read through ``view``:
the folder reached without the mount, so a poll never waits on an op a storage
fault holds; events still name the path the job wrote.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from chaos.events import CheckpointEv, ProgressEv, Timeline, last
from chaos.events.checkpoint_events import Save
from chaos.watchers.api import Watcher

Signature = tuple[int, int, int]  # inode, mtime_ns, size
_TEMP_SUFFIXES = (".tmp", ".temp", ".partial", ".part", "~", ".swp", ".lock")
MAX_FILES = 2000
SLACK_S = 0.15
"""A regex step is stamped when its node's log last grew before the line was read (a
line written after it in the same read moves it later): a save this close after it
still belongs to it."""
GIVE_UP_S = 10.0
"""A complete save waits at most this long for the node logs to be read past it."""


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


Roots = Callable[[], Mapping[str | None, Path]]
"""Where to look: node -> the watched path on that node's own disk (None: a shared path)."""


class NodeRoots:
    """A relative checkpoint path on every node's own disk: ``workdirs()`` gives each live node's
    folder (Platform.node_workdirs; None or {} where none is on this machine). Callable as a
    CheckpointWatcher's roots; ``seen`` keeps every node folder it was ever given."""

    def __init__(self, workdirs: Callable[[], Mapping[str, Path] | None], path: str) -> None:
        self._workdirs = workdirs
        self.path = path
        self.seen: dict[str, Path] = {}

    def __call__(self) -> dict[str | None, Path]:
        now = dict(self._workdirs() or {})
        self.seen.update(now)
        return {node: folder / self.path for node, folder in now.items()}


class CheckpointWatcher(Watcher):
    """Turns replacements of ``path`` into ``checkpoint/saved`` events.

    ``path`` is one shared path, or a callable giving each node's own (a job whose nodes
    run on local disks: chaos.platforms.local.disks); a save there is that node's event,
    and a node's disk first seen after the start is empty, so what appears on it is saved.
    ``read_until`` is the time up to which every node log has been read (the LogFollower's):
    a complete save waits until the progress line before it can have been read, so a
    follower running late under load does not put a save on the step before."""

    interval_s = 0.2

    def __init__(self, timeline: Timeline, path: Path | Roots, *,
                 step_at: Callable[[float], int | None] | None = None,
                 read_until: Callable[[], float] | None = None,
                 view: Callable[[Path], Path] | None = None) -> None:
        super().__init__(timeline)
        self.path = path if isinstance(path, Path) else None
        self._roots: Roots = (lambda: {None: path}) if isinstance(path, Path) else path
        self.view = view
        """Where to read a watched path from (the storage layer's direct view); None: the path itself."""
        self.step_at = step_at or self._latest_step
        self._read_until = read_until
        self.saves = 0
        self._known: dict[str | None, dict[Path, Signature]] | None = None
        self._pending: dict[Path, Signature] = {}
        self._complete: list[tuple[str | None, Path, Signature]] = []
        self.unsettled = 0
        """Times a changed file changed again before it held still for a poll: a script that rewrites it faster
        than one poll leaves no save this watcher can confirm complete, and the steady check says so."""

    def poll(self) -> None:
        roots = dict(self._roots())
        if self._known is None:  # the baseline: what was there before the job wrote anything
            self._known = {node: self._scan(root) for node, root in roots.items()}
            return
        for node, root in roots.items():
            self._look(node, self._scan(root), self._known.setdefault(node, {}))
        for gone in set(self._known) - set(roots):  # a node's disk that went with it
            del self._known[gone]
        self._attribute()

    def _look(self, node: str | None, seen: dict[Path, Signature], known: dict[Path, Signature]) -> None:
        for p, sig in seen.items():
            if known.get(p) == sig:
                self._pending.pop(p, None)
            elif self._pending.get(p) == sig:  # changed, then held still for a poll: complete
                del self._pending[p]
                known[p] = sig
                self._complete.append((node, p, sig))
            else:
                if p in self._pending:  # changed again before holding still: no save confirmed from it
                    self.unsettled += 1
                self._pending[p] = sig
        for gone in set(known) - set(seen):
            del known[gone]

    def _scan(self, root: Path) -> dict[Path, Signature]:
        """``scan`` of ``root``, read through the view, keyed by the paths the job wrote."""
        where = self.view(root) if self.view is not None else root
        if where == root:
            return scan(root)
        return {root / p.relative_to(where) if p != where else root: sig for p, sig in scan(where).items()}

    def _attribute(self) -> None:
        """Emit the complete saves whose step can be known: the logs have been read past
        them (or the run is ending, or the follower is far behind)."""
        read = self._read_until() if self._read_until is not None else float("inf")
        final, now = self._stop.is_set(), time.time()
        waiting = []
        for node, p, sig in self._complete:
            mtime = sig[1] / 1e9
            if final or read >= mtime + SLACK_S or now - mtime > GIVE_UP_S:
                self._emit(node, p, sig)
            else:
                waiting.append((node, p, sig))
        self._complete = waiting

    def _emit(self, node: str | None, p: Path, sig: Signature) -> None:
        t = sig[1] / 1e9
        step = self.step_at(t)
        self.saves += 1
        self.timeline.emit(CheckpointEv.SAVED, node, Save(
            path=str(p), reason="observed", via="file", inode=sig[0], size=sig[2], step=step,
            step_from="progress" if step is not None else None), t=t)

    def _latest_step(self, t: float) -> int | None:
        latest = last(self.timeline.events(), ProgressEv.STEP, until=t + SLACK_S)
        return latest.data.step if latest is not None else None
