"""More than one writer of a checkpoint path at once, seen through inotify.

The checkpoint file watcher (watchers/checkpoints.py) sees a path change and hold still; a
file does not say how many processes wrote it. A script whose every node's local rank 0
saves the same path into a shared workdir (``if local_rank == 0: torch.save(..., "snapshot.pt")``)
races itself: each ``open(path, "wb")`` truncates the others' bytes, and a restart cannot
load the result. The kernel sees it (elastic_chaos.watchers.inotify): each open of a file in a
watched folder, each close of one opened for writing, each rename into place, in order. A
write of a path spans from its writer's open (of the path, or of the temporary file renamed
onto it) to its close (or the rename); writes whose spans overlap in that order are one
burst, and a burst of two or more is more than one writer at once.

Overlap, not nearness in time: one writer that saves twice back to back (the last epoch's
save, then the final one) completes two writes within milliseconds and is one writer; two
writers that both had the file open are two, whatever the clock says. Two writers whose
writes happen not to overlap leave whole files and are not counted. Neither is a save whose
events merged before the path itself was watched (the first save of a path that did not
exist yet, a file in a folder created since the last poll): the later ones are.

Where inotify cannot watch (not Linux, the per-user limits reached, a network filesystem
whose other clients' writes this kernel never sees) ``Writers`` says why at info level and
counts nothing: it never fails the watcher that owns it.
"""
from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from elastic_chaos.events.checkpoint_events import ConcurrentWrites
from elastic_chaos.watchers.inotify import (
    FILE_MASK,
    IN_CLOSE_NOWRITE,
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_IGNORED,
    IN_ISDIR,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_OPEN,
    IN_Q_OVERFLOW,
    MOUNTINFO,
    Inotify,
    Raw,
    filesystem,
    remote,
)

log = logging.getLogger(__name__)

MAX_WATCHES = 256
"""Folders watched for one checkpoint path at most, and files besides."""
MAX_NAMES = 4096
"""File names whose opens are followed at once (a folder where a script opens many files)."""


@dataclass(frozen=True)
class Target:
    """One watched checkpoint path: ``where`` is read (the storage layer's direct view, or the
    path itself), ``shown`` is the path the job wrote (what events name)."""

    node: str | None
    shown: Path
    where: Path


@dataclass(frozen=True)
class _Dir:
    """A watched folder: ``only``, the one name counted in it (a watched file's folder), or None:
    every name that is no temporary one (a watched folder and its subfolders)."""

    target: Target
    folder: Path
    only: str | None

    def final(self, name: str, temporary: Callable[[str], bool]) -> Path | None:
        """The path the job wrote that a write of ``name`` is, or None: not a checkpoint path."""
        if self.only is not None:
            return self.target.shown if name == self.only else None
        if temporary(name):
            return None
        try:
            return self.target.shown / (self.folder / name).relative_to(self.target.where)
        except ValueError:  # a folder moved out of the watched one since it was watched
            return None


@dataclass
class _Name:
    """One file name's writes in progress: the opens not yet closed (event numbers), the last
    write's close, and writes made under a temporary name not yet renamed onto a watched path."""

    opens: list[int] = field(default_factory=list)
    closed: int = -1
    unsaid: list[tuple[int, int]] = field(default_factory=list)
    """(began, ended) of each."""


@dataclass
class Seen:
    """One checkpoint path's writes: the burst it is in, and what was seen of its bursts."""

    node: str | None
    burst_writes: int = 0
    burst_end: int = -1
    bursts: int = 0
    """Bursts of overlapping writes (more than one writer at once)."""
    most: int = 0
    """The most writes in one."""
    first_at: float | None = None
    last_at: float | None = None
    said: tuple[int, int] | None = None
    """(bursts, most) when last reported."""

    def news(self, final: bool) -> bool:
        """Worth an event: the first burst of several writers, more writers at once than said
        before, or (as the run ends) more bursts than said."""
        if self.bursts == 0:
            return False
        if self.said is None or self.most > self.said[1]:
            return True
        return final and self.said[0] != self.bursts

    def payload(self, path: Path) -> ConcurrentWrites:
        return ConcurrentWrites(path=str(path), writes=self.most, bursts=self.bursts, first_at=self.first_at,
                                last_at=self.last_at)


class Writers:
    """Counts the overlapping writes of each watched checkpoint path. ``temporary`` names the
    files a save writes before renaming them into place (their writes count for the path they
    are renamed onto); ``mountinfo``, the mount table that says which filesystem a path is on.
    Not thread-safe: one watcher's thread polls it."""

    def __init__(self, temporary: Callable[[str], bool], *, mountinfo: Path = MOUNTINFO) -> None:
        self._temporary = temporary
        self._mountinfo = mountinfo
        self._ino: Inotify | None = None
        self.off: str | None = None
        """Why nothing is counted (inotify unavailable), or None."""
        self._dirs: dict[int, _Dir] = {}
        self._files: dict[int, Target] = {}
        self._watched: dict[Target, list[int]] = {}
        self._skipped: set[Target] = set()
        """On a network filesystem: not watched."""
        self._capped: set[Target] = set()
        self._names: OrderedDict[tuple[int, str], _Name] = OrderedDict()
        self._moves: dict[int, _Name] = {}
        self._paths: dict[Path, Seen] = {}
        self._seq = 0

    def poll(self, targets: Iterable[Target], now: float, *, final: bool = False) -> list[tuple[Path, Seen]]:
        """Watch ``targets`` (dropping the ones gone), read what happened since the last poll and
        return (path, what was seen) for each path worth an event now (``final``: the run's last
        poll). Returns at once; never raises for inotify (see ``off``)."""
        if self.off is not None:
            return []
        try:
            self._sync(list(targets))
            for raw in self._ino.read() if self._ino is not None else []:
                self._handle(raw, now)
        except OSError as exc:
            self._give_up(str(exc))
            return []
        out = [(p, seen) for p, seen in self._paths.items() if seen.news(final)]
        for _, seen in out:
            seen.said = (seen.bursts, seen.most)
        return out

    def close(self) -> None:
        """Release the inotify instance; idempotent. Nothing is counted after."""
        self.off = self.off or "closed"
        if self._ino is not None:
            self._ino.close()
            self._ino = None

    # -- watches ---------------------------------------------------------------------------
    def _sync(self, targets: list[Target]) -> None:
        for gone in set(self._watched) - set(targets):
            for wd in list(self._watched[gone]):
                self._forget(wd, remove=True)
            del self._watched[gone]
        for target in targets:
            if target in self._skipped:
                continue
            if not any(wd in self._dirs for wd in self._watched.get(target, ())):
                self._watch(target)
            if not target.where.is_dir() and self._watched.get(target):
                self._watch_file(target, target.where)  # after a rename into place: the new file

    def _watch(self, target: Target) -> None:
        where = target.where
        folder = where if where.is_dir() else where.parent
        if not folder.is_dir():
            return  # not there yet: tried again at the next poll
        kind = filesystem(folder, self._mountinfo)
        if remote(kind):
            log.info("writers of %s are not counted: it is on %s, whose other clients' writes inotify "
                     "does not see", target.shown, kind)
            self._skipped.add(target)
            return
        if self._ino is None:
            self._ino = Inotify()
        if folder == where:
            self._add_tree(target, where)
        else:
            self._add(_Dir(target, folder, where.name))

    def _room(self, target: Target, *, files: bool) -> bool:
        """Whether one more folder (or file) of ``target`` may be watched; said once when not."""
        mine = self._files if files else self._dirs
        watched = self._watched.get(target, ())
        if sum(1 for wd in watched if wd in mine) < MAX_WATCHES:
            return True
        if target not in self._capped:
            log.info("writers under %s: only %d of its folders and files are watched", target.shown, MAX_WATCHES)
            self._capped.add(target)
        return False

    def _add_tree(self, target: Target, top: Path) -> None:
        """Watch ``top``, the folders under it (hidden ones skipped, as the file watcher does) and
        the checkpoint files in them."""
        for root, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            if not self._room(target, files=False):
                return
            self._add(_Dir(target, Path(root), None))
            for name in files:
                if not self._temporary(name):
                    self._watch_file(target, Path(root) / name)

    def _add(self, d: _Dir) -> None:
        if self._ino is None:
            return
        try:
            wd = self._ino.add(d.folder)
        except (FileNotFoundError, NotADirectoryError):
            return  # changed as we looked
        self._dirs[wd] = d  # a folder renamed into place: the same descriptor, named anew
        watched = self._watched.setdefault(d.target, [])
        if wd not in watched:
            watched.append(wd)

    def _watch_file(self, target: Target, path: Path) -> None:
        """Watch a checkpoint file itself too, so that two writers opening it back to back are two
        events (elastic_chaos.watchers.inotify: identical events in a row merge)."""
        if self._ino is None or not self._room(target, files=True):
            return
        try:
            wd = self._ino.add(path, FILE_MASK)
        except (FileNotFoundError, NotADirectoryError):
            return
        if wd not in self._files and wd not in self._dirs:
            self._files[wd] = target
            self._watched.setdefault(target, []).append(wd)

    def _new_folder(self, d: _Dir, name: str) -> None:
        """A folder made in a watched one: a subfolder of a watched folder, or the watched path
        itself made a folder (watched as a file's folder until then). What it got before the
        watch was added is missed."""
        if d.only is None:
            self._add_tree(d.target, d.folder / name)
        elif name == d.only:
            for wd in list(self._watched.get(d.target, ())):
                self._forget(wd, remove=True)
            self._add_tree(d.target, d.target.where)

    def _forget(self, wd: int, *, remove: bool = False) -> None:
        target = d.target if (d := self._dirs.pop(wd, None)) is not None else self._files.pop(wd, None)
        if remove and self._ino is not None:
            self._ino.remove(wd)
        if target is not None and wd in self._watched.get(target, ()):
            self._watched[target].remove(wd)

    def _give_up(self, why: str) -> None:
        log.info("writers of the checkpoint are not counted: %s", why)
        self.off = why
        self.close()

    # -- events ----------------------------------------------------------------------------
    def _handle(self, raw: Raw, now: float) -> None:
        self._seq += 1
        if raw.mask & IN_Q_OVERFLOW:  # events were lost: what is open is unknown, start again
            self._names.clear()
            self._moves.clear()
            return
        if raw.mask & IN_IGNORED:  # the folder or file is gone
            self._forget(raw.wd)
            return
        d = self._dirs.get(raw.wd)
        if d is None or not raw.name:  # a watched file's own copy of its folder's event
            return
        if raw.mask & IN_ISDIR:
            if raw.mask & (IN_CREATE | IN_MOVED_TO) and not raw.name.startswith("."):
                self._new_folder(d, raw.name)
            return
        key = (raw.wd, raw.name)
        if raw.mask & IN_OPEN:
            self._name(key).opens.append(self._seq)
        elif raw.mask & (IN_CLOSE_WRITE | IN_CLOSE_NOWRITE):
            self._closed(key, d, wrote=bool(raw.mask & IN_CLOSE_WRITE), now=now)
        elif raw.mask & IN_MOVED_FROM:
            self._moves[raw.cookie] = self._names.pop(key) if key in self._names else _Name()
        elif raw.mask & IN_MOVED_TO:
            self._moved_in(key, d, self._moves.pop(raw.cookie, None), now)

    def _name(self, key: tuple[int, str]) -> _Name:
        n = self._names.get(key)
        if n is None:
            n = self._names[key] = _Name()
            while len(self._names) > MAX_NAMES:
                self._names.popitem(last=False)
        return n

    def _closed(self, key: tuple[int, str], d: _Dir, *, wrote: bool, now: float) -> None:
        n = self._name(key)
        if not wrote:  # a reader's close: most likely of the latest open
            if n.opens:
                n.opens.remove(max(n.opens))
        else:
            began = _began(n)
            span = (self._seq if began is None else began, self._seq)
            n.closed = self._seq
            final = d.final(key[1], self._temporary)
            if final is not None:
                self._wrote(final, d.target.node, span, now)
                self._watch_file(d.target, d.folder / key[1])
            else:  # a temporary file: a write of the path it is renamed onto
                n.unsaid = [*n.unsaid[-7:], span]
        if not n.opens and not n.unsaid:
            del self._names[key]

    def _moved_in(self, key: tuple[int, str], d: _Dir, moved: _Name | None, now: float) -> None:
        """A rename onto ``key``: the writes made under the old name land here (a writer still
        holding the old name's file closes it under this one)."""
        moved = moved or _Name()
        final = d.final(key[1], self._temporary)
        if final is not None:  # with nothing seen of it (written elsewhere): a write that ends now
            for span in moved.unsaid or [(self._seq, self._seq)]:
                self._wrote(final, d.target.node, span, now)
            moved.unsaid = []
            self._watch_file(d.target, d.folder / key[1])
        if key in self._names:  # the file it replaced is unlinked: nothing more is heard of it
            del self._names[key]
        if moved.opens or moved.unsaid:
            self._names[key] = moved

    def _wrote(self, path: Path, node: str | None, span: tuple[int, int], now: float) -> None:
        """A write of ``path`` (``span``: the events it began and completed at) is seen now: in the
        burst of the writes before it when it began before the last of them completed."""
        seen = self._paths.setdefault(path, Seen(node))
        began, ended = span
        if began < seen.burst_end:
            seen.burst_writes += 1
            if seen.burst_writes == 2:
                seen.bursts += 1
                seen.first_at = seen.first_at or now
            seen.most = max(seen.most, seen.burst_writes)
            seen.last_at = now
            seen.burst_end = max(seen.burst_end, ended)
        else:
            seen.burst_writes, seen.burst_end = 1, ended


def _began(n: _Name) -> int | None:
    """When the write a close ends began: the oldest open since the name's last write completed
    (a writer that began after it), else the oldest still open (one that was writing already);
    None where no open was seen (the watch began after it). The open is taken off ``opens``."""
    fresh = [s for s in n.opens if s > n.closed]
    began = min(fresh) if fresh else min(n.opens, default=None)
    if began is not None:
        n.opens.remove(began)
    return began
