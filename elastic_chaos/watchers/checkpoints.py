"""Watch an unmodified script's checkpoint file (or directory) for replacements.

A script that does not report its saves still leaves them on the shared
volume. Each poll stats the watched path (a file, or every file under a
directory, temporary files skipped); a file whose signature (inode, mtime,
size) changed and then held still for one poll is complete. The files that
complete together are one save (a folder save: model.pt and optim.pt, a
folder of shards): those that complete in one poll, one still being written
when another completed, or one written within GROUP_S of a save still
waiting to be emitted. A save becomes a ``checkpoint/saved`` event shaped
like ``elastic_chaos.trainer.progress``'s: ``step``, ``path`` (the file, or the folder its
files share), ``reason`` ("observed") plus ``via: "file"``, ``files``, inode
and size. Its time is its last file's mtime (when the data was written, not
when we looked); its ``step`` is the last progress step completed before it
began, marked ``step_from: "progress"``, because a file does not say which
step it holds. A rename into place (the atomic save) and an in-place rewrite
both count; one that lands twice within a poll is seen once. Files present
when the watch starts are the baseline, not saves. On node-local disks each
node's folder is watched, and a save there is that node's.

Where the kernel can tell (inotify: elastic_chaos.watchers.writers), the watcher also
counts the writers of each checkpoint path: more than one at once (every node
saving the same file into a shared workdir) is a ``checkpoint/concurrent_writes``
event.

A file behind the storage layer (elastic_chaos.platforms.storage) is read through ``view``:
the folder reached without the mount, so a poll never waits on an op a storage
fault holds; events still name the path the job wrote.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_chaos.events import CheckpointEv, Event, ProgressEv, Timeline, field_value, last
from elastic_chaos.events.checkpoint_events import Save
from elastic_chaos.watchers.api import Watcher
from elastic_chaos.watchers.folder_saves import (
    DCP_METADATA,
    dcp_folders,
    folder_step,
    is_complete_dcp,
    matches,
    pointer_target,
    split_glob,
)
from elastic_chaos.watchers.writers import Target, Writers

Signature = tuple[int, int, int]  # inode, mtime_ns, size
_TEMP_SUFFIXES = (".tmp", ".temp", ".partial", ".part", "~", ".swp", ".lock")
MAX_FILES = 2000
SLACK_S = 0.15
"""A regex step without a lower bound (``written_after``) is stamped when its node's log last
grew before the line was read (a line written after it in the same read moves it later): a save
this close after it still belongs to it."""
def _coarse_tick() -> float:
    """The tick of the clock the kernel stamps mtimes with (CLOCK_REALTIME_COARSE: 4 ms at 250 Hz)."""
    try:
        return time.clock_getres(getattr(time, "CLOCK_REALTIME_COARSE", 5))
    except (OSError, AttributeError):
        return 0.01


CLOCK_GRAIN_S = _coarse_tick()
"""A file's mtime comes from the kernel's coarse clock, up to one tick behind the write it stamps:
a step whose lower bound is less than a tick after a save's mtime may still have been before it."""
CROSS_NODE_S = 0.05
"""A progress line of another node printed this soon after a node's save tells of the step it saved."""
GIVE_UP_S = 10.0
"""A complete save waits at most this long for the node logs to be read past it."""
GROUP_S = 0.5
"""A file that completes while a save waits to be emitted joins it when written this close after
the save's last file (a folder save's files are written back to back; a file per epoch comes a
step or more later: the tqdm shape's epochs are 0.6 s)."""
HOLD_S = 60.0
"""A save waits at most this long for a file of it still being written (a large optimizer state)."""
HOLD_POLLS = 2
"""A file still being written holds a save when it began at most this many polls before the
save's first file (files of one save start together; a log rewritten all run long does not)."""


def is_temporary(name: str) -> bool:
    """Names writers use for a save in progress (hidden files, *.tmp, ...); a DCP folder's
    ``.metadata`` is hidden and no temporary: it completes the save."""
    low = name.lower()
    if name == DCP_METADATA:
        return False
    return low.startswith(".") or low.endswith(_TEMP_SUFFIXES) or ".tmp" in low


def scan(path: Path) -> dict[Path, Signature]:
    """The watched file's signature, or every non-temporary file's under a directory; a glob
    (``ckpt/step-*``): every such file under what it matches."""
    base, pattern = split_glob(path)
    if pattern:
        return {p: sig for p, sig in scan(base).items() if matches(p.relative_to(base), pattern)}
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


def completed_before(step: Event[Any], t: float, saver: str | None = None) -> bool:
    """Whether a progress step was completed before ``t`` (a save's mtime). A regex step carries
    a lower bound (``written_after``: its line was not in the log yet then): it was before the save
    when that bound is; a step without one (elastic_chaos.trainer.progress' exact time, an older regex step) is
    when its time is, give or take SLACK_S. ``saver``: the node that saved, when known: a line
    another node printed up to CROSS_NODE_S after the save tells of the same step (the ranks of a
    step finish together at its all-reduce; which of them writes first is a race of milliseconds)."""
    grain = CROSS_NODE_S if saver is not None and step.node != saver else CLOCK_GRAIN_S
    after = field_value(step.data, "written_after")
    if isinstance(after, (int, float)):
        return after < t + grain
    return step.t <= t + max(SLACK_S, grain)


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


@dataclass
class _Changing:
    """A file seen changing and not yet still: its signature, whose it is, the poll it began."""

    sig: Signature
    node: str | None
    since: int


@dataclass
class _Save:
    """Files that completed together: one save. ``since``: the poll its first file was first seen
    changing; ``poll``: the poll its latest completed; ``closed``: no file joins it any more."""

    node: str | None
    files: dict[Path, Signature]
    since: int
    poll: int
    closed: bool = False
    folder: Path | None = None
    """A DCP save's folder: its files are the folder's, whenever each completed."""

    @property
    def began(self) -> float:
        return min(sig[1] for sig in self.files.values()) / 1e9

    @property
    def ended(self) -> float:
        return max(sig[1] for sig in self.files.values()) / 1e9

    def joins(self, path: Path, sig: Signature, since: int) -> bool:
        """Whether a file that completed now is part of this save: another file, still being
        written when this save's latest completed, or written within GROUP_S of it."""
        return path not in self.files and (since <= self.poll or abs(sig[1] / 1e9 - self.ended) <= GROUP_S)


class CheckpointWatcher(Watcher):
    """Turns replacements of ``path`` into ``checkpoint/saved`` events.

    ``path`` is one shared path, or a callable giving each node's own (a job whose nodes
    run on local disks: elastic_chaos.platforms.local.disks); a save there is that node's event,
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
        self._step_at = step_at
        self.step_at = step_at or self._latest_step
        self._read_until = read_until
        self.saves = 0
        self._known: dict[str | None, dict[Path, Signature]] | None = None
        self._changing: dict[Path, _Changing] = {}
        self._open: dict[str | None, _Save] = {}
        self._closed: list[_Save] = []
        self._polls = 0
        self.writers = Writers(is_temporary)
        """The writers of each checkpoint path, where inotify can count them (``writers.off``: why not)."""
        self._dcp: dict[tuple[str | None, Path], _Save] = {}
        """DCP folders whose files completed, by node and folder: a save once ``.metadata`` is among them."""
        self.pointers = 0
        """Changes of a pointer file (``latest``: its content names a save's folder), which are no saves."""
        self.unsettled = 0
        """Times a changed file changed again before it held still for a poll: a script that rewrites it faster
        than one poll leaves no save this watcher can confirm complete, and the steady check says so."""

    def poll(self) -> None:
        self._polls += 1
        roots = dict(self._roots())
        self._count_writers(roots)
        if self._known is None:  # the baseline: what was there before the job wrote anything
            self._known = {node: self._scan(root) for node, root in roots.items()}
            return
        for node, root in roots.items():
            seen = self._scan(root)
            done = self._look(node, seen, self._known.setdefault(node, {}))
            folders = dcp_folders(seen)
            self._gather(node, [d for d in self._not_pointers(root, done) if d[0].parent not in folders])
            self._gather_dcp(node, [d for d in done if d[0].parent in folders], folders)
        for gone in set(self._known) - set(roots):  # a node's disk that went with it
            del self._known[gone]
            self._changing = {p: c for p, c in self._changing.items() if c.node != gone}
        self._attribute()

    def finish(self) -> None:
        self.writers.close()

    def _look(self, node: str | None, seen: dict[Path, Signature],
              known: dict[Path, Signature]) -> list[tuple[Path, Signature, int]]:
        """Files of ``node`` that completed in this poll (path, signature, the poll each began)."""
        done = []
        for p, sig in seen.items():
            was = self._changing.get(p)
            if known.get(p) == sig:
                self._changing.pop(p, None)
            elif was is not None and was.sig == sig:  # changed, then held still for a poll: complete
                del self._changing[p]
                known[p] = sig
                done.append((p, sig, was.since))
            else:
                if was is not None:  # changed again before holding still: no save confirmed from it
                    self.unsettled += 1
                self._changing[p] = _Changing(sig, node, was.since if was is not None else self._polls)
        for gone in set(known) - set(seen):
            del known[gone]
        for p in [p for p, c in self._changing.items() if c.node == node and p not in seen]:
            del self._changing[p]  # removed before it held still
        return done

    def _gather(self, node: str | None, done: list[tuple[Path, Signature, int]]) -> None:
        """Put the files that completed into the node's open save, or begin another."""
        for p, sig, since in sorted(done, key=lambda d: d[1][1]):
            save = self._open.get(node)
            if save is not None and not save.joins(p, sig, since):
                save.closed = True
                self._closed.append(self._open.pop(node))
                save = None
            if save is None:
                save = self._open[node] = _Save(node, {}, since, self._polls)
            save.files[p] = sig
            save.since, save.poll = min(save.since, since), self._polls

    def _not_pointers(self, root: Path, done: Iterable[tuple[Path, Signature, int]]
                      ) -> list[tuple[Path, Signature, int]]:
        """``done`` less the pointer files (counted in ``pointers``): read through the view."""
        base = split_glob(root)[0]
        where = self._where(base)
        kept = []
        for d in done:
            if pointer_target(where / d[0].relative_to(base), d[1][2]) is not None:
                self.pointers += 1
            else:
                kept.append(d)
        return kept

    def _gather_dcp(self, node: str | None, done: list[tuple[Path, Signature, int]], folders: set[Path]) -> None:
        """Put the files of DCP folders that completed into their folder's save; a folder whose
        ``.metadata`` completed and none of whose files is still being written is one save, closed."""
        for key in [k for k in self._dcp if k[0] == node and k[1] not in folders]:
            del self._dcp[key]  # the folder went (pruned) before its save was complete
        for p, sig, since in done:
            save = self._dcp.setdefault((node, p.parent), _Save(node, {}, since, self._polls, folder=p.parent))
            save.files[p] = sig
            save.since, save.poll = min(save.since, since), self._polls
        known = (self._known or {}).get(node, {})
        for (n, folder), save in list(self._dcp.items()):
            if n != node or not is_complete_dcp(folder, save.files):
                continue
            if any(c.node == node and p.parent == folder for p, c in self._changing.items()):
                continue  # a shard (or .metadata itself) still being written
            save.files.update({p: s for p, s in known.items() if p.parent == folder})  # shards seen before
            save.closed = True
            self._closed.append(self._dcp.pop((n, folder)))

    def _scan(self, root: Path) -> dict[Path, Signature]:
        """``scan`` of ``root``, read through the view, keyed by the paths the job wrote."""
        where = self._where(root)
        if where == root:
            return scan(root)
        return {root / p.relative_to(where) if p != where else root: sig for p, sig in scan(where).items()}

    def _where(self, root: Path) -> Path:
        base, pattern = split_glob(root)
        where = self.view(base) if self.view is not None else base
        return where.joinpath(*pattern)

    def _attribute(self) -> None:
        """Emit the complete saves whose step can be known: the logs have been read past
        them (or the run is ending, or the follower is far behind), and no file of theirs is
        still being written."""
        read = self._read_until() if self._read_until is not None else float("inf")
        final, now = self._stop.is_set(), time.time()
        for save in [*self._closed, *self._open.values()]:
            if not final and (self._held(save, now) or (read < save.ended + SLACK_S
                                                        and now - save.ended <= GIVE_UP_S)):
                continue
            self._emit(save)
            if save.closed:
                self._closed.remove(save)
            else:
                del self._open[save.node]

    def _held(self, save: _Save, now: float) -> bool:
        """A file of this save is still being written: one of its node's, seen changing by the poll
        its latest file completed and not long before its first began."""
        if save.closed or now - save.ended > HOLD_S:
            return False
        return any(c.node == save.node and save.since - HOLD_POLLS <= c.since <= save.poll
                   for c in self._changing.values())

    def _emit(self, save: _Save) -> None:
        """One ``checkpoint/saved``: named by its file, or by the folder its files share (the
        watched folder at most), timed by its last file, on the step completed before its first."""
        files = sorted(save.files)
        one = len(files) == 1 and save.folder is None
        path = save.folder or (files[0] if one else Path(os.path.commonpath(files)))
        step, step_from = self._step_of(save, path)
        self.saves += 1
        self.timeline.emit(CheckpointEv.SAVED, save.node, Save(
            path=str(path), reason="observed", via="file",
            inode=save.files[files[0]][0] if one else None, size=sum(s[2] for s in save.files.values()),
            files=len(files), step=step, step_from=step_from), t=save.ended)

    def _step_of(self, save: _Save, path: Path) -> tuple[int | None, str | None]:
        """A save's step: the one its folder's name carries (a DCP folder's, or the folder a glob
        matched), else the last progress step completed before its first file."""
        named = folder_step(path) if save.folder is not None or self._globbed(path) else None
        if named is not None:
            return named, "folder"
        step = self.step_at(save.began) if self._step_at is not None else self._latest_step(save.began, save.node)
        return step, "progress" if step is not None else None

    def _globbed(self, path: Path) -> bool:
        """Whether ``path`` is a folder a watched glob matched (``ckpt/step-*``: ``ckpt/step-40``)."""
        for root in self._roots().values():
            base, pattern = split_glob(root)
            if pattern and path.is_relative_to(base) and len(path.relative_to(base).parts) == len(pattern) \
                    and matches(path.relative_to(base), pattern):
                return True
        return False

    def _latest_step(self, t: float, saver: str | None = None) -> int | None:
        """The last progress step completed before ``t``, by a save of ``saver`` (see ``completed_before``)."""
        latest = last(self.timeline.events(), ProgressEv.STEP, where=lambda e: completed_before(e, t, saver))
        return latest.data.step if latest is not None else None

    def _count_writers(self, roots: Mapping[str | None, Path]) -> None:
        """Read what inotify saw of the checkpoint paths' writers; say a path written by more than
        one at once (when first seen, when more are seen at once, and as the run ends)."""
        bases = {node: split_glob(root)[0] for node, root in roots.items()}  # a glob: the folder it is under
        targets = [Target(node, base, self._where(base)) for node, base in bases.items()]
        for path, seen in self.writers.poll(targets, time.time(), final=self._stop.is_set()):
            self.timeline.emit(CheckpointEv.CONCURRENT_WRITES, seen.node, seen.payload(path), t=seen.last_at)
