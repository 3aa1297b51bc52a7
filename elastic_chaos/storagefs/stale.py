"""What a stale cache shows: the volume as it was when a stale-read rule was set, per node.

While a :class:`~elastic_chaos.storagefs.rules.StaleRead` rule is active the daemon
remembers, before the first change of each path after the rule was set (a create, a
rename from or onto it, an unlink, a mkdir or rmdir, an open for writing, a setattr),
what the path held: nothing, or the object itself (an ``O_PATH`` descriptor keeps the
inode, and so its bytes, alive after a rename over it or an unlink), or a copy of its
bytes when it is about to be rewritten in place. It also remembers which nodes changed
it: those see it as it is. A caller the rule covers, of any other node, is answered
from what was remembered:

- a lookup of the path finds the old object (its own node id: the kernel keeps one page
  cache per inode, so the old and the new bytes never mix), or nothing (ENOENT);
- a listing of its folder shows the old entry, or none.

Nothing changes for a path that was not changed since the rule was set: it is still what
it was; nor inside a folder made since (nothing of it can have been cached): a node that
sees the folder (it made it) sees what is in it as it is. While the view is on, names and
attributes are answered with a zero cache time (:data:`VALID_S`), so the kernel asks again
on every path walk and each caller gets its own answer.

This is the behaviour of an NFS client whose caches are not revalidated (``nocto``, a
long ``actimeo``): a cached negative lookup or a cached listing hides a file another
client created; cached pages of a file another client replaced are served as they were.
A real client revalidates after ``acdirmax`` or on close-to-open; this one stays stale
until the rule is cleared. Removed files stay readable here (their pages are cached); a
real client whose cache does not hold them gets ESTALE instead.
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from elastic_chaos.storagefs.fs import O_PATH, Passthrough

VALID_S = 0
"""The entry and attribute cache time while a view is on: none."""
_COPY_CHUNK = 1 << 20


@dataclass
class _Old:
    """What one path held when the view began: ``fd`` None for nothing."""

    fd: int | None
    ino: int = 0
    mode: int = 0
    copy: bool = False
    """``fd`` holds a copy of the bytes (the file was rewritten in place), not the old inode."""
    changed_by: set[str | None] = field(default_factory=set)
    """The nodes that changed the path since (None: a caller of no node): they see it as it is."""


class StaleView:
    """The remembered paths of one mount. Thread-safe; :meth:`switch` is the engine's ``on_stale``."""

    def __init__(self, fs: Passthrough, stash: Path) -> None:
        self.fs = fs
        self.stash = stash
        """Where copies of rewritten files are kept (unnamed files: they vanish with the daemon)."""
        self._lock = threading.Lock()
        self._on = False
        self._paths: dict[str, _Old] = {}
        self._copies: dict[tuple[int, int], str] = {}
        """Copies' inode keys, with the path each stands for (a node made of one reads as that path)."""
        self._kept: set[tuple[int, int]] = set()
        """Old inodes kept (unlinked or renamed over): a write through one is a write through a stale handle."""

    @property
    def on(self) -> bool:
        return self._on

    def switch(self, on: bool) -> None:
        """Begin remembering (the first stale-read rule was set), or forget everything (the last one
        went): copies and kept inodes are let go; nodes the kernel holds keep their own descriptors."""
        with self._lock:
            self._on = on
            fds = [o.fd for o in self._paths.values() if o.fd is not None]
            self._paths.clear()
            self._copies.clear()
            self._kept.clear()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- changes ----------------------------------------------------------------------
    def before_change(self, parent: int, name: str, path: str, node: str | None, *, copy: bool = False) -> None:
        """``node`` is about to change ``path`` (``name`` in folder node ``parent``): remember what it holds
        first, when nothing has changed it since the view began (``copy``: a copy of a regular file's
        bytes, for an op that may rewrite it in place), and that ``node`` sees it as it is from now on."""
        if self._on:
            self._before(path, node, copy, lambda: os.open(name, O_PATH, dir_fd=self.fs.node(parent).fd))

    def before_node_change(self, nodeid: int, path: str, node: str | None) -> None:
        """``node`` is about to rewrite node ``nodeid`` (at ``path``) in place: remember a copy of its bytes."""
        if self._on:
            self._before(path, node, True, lambda: _reopen(self.fs.node(nodeid).fd))

    def _before(self, path: str, node: str | None, copy: bool, open_path: Callable[[], int]) -> None:
        with self._lock:
            if not self._on:
                return
            old = self._paths.get(path)
            if old is None:
                old = self._paths[path] = self._capture(path, copy, open_path)
            old.changed_by.add(node)

    def _capture(self, path: str, copy: bool, open_path: Callable[[], int]) -> _Old:
        """What ``path`` holds now: its object (``open_path()`` opens it ``O_PATH``), a copy of its bytes
        (``copy``, a regular file), or nothing."""
        try:
            fd = open_path()
        except FileNotFoundError:
            return _Old(None)
        st = os.fstat(fd)
        if copy and stat.S_ISREG(st.st_mode):
            try:
                made = _copy_of(fd, st, self.stash)
            finally:
                os.close(fd)
            key = os.fstat(made)
            self._copies[(key.st_dev, key.st_ino)] = path
            return _Old(made, key.st_ino, st.st_mode, copy=True)   # listed with the inode a lookup finds
        self._kept.add((st.st_dev, st.st_ino))
        return _Old(fd, st.st_ino, st.st_mode)

    def refresh(self, path: str, node: str | None) -> None:
        """``node`` sees ``path`` as it is from now on (a server's answer refreshed its cache)."""
        with self._lock:
            old = self._paths.get(path)
            if old is not None:
                old.changed_by.add(node)

    def stale_handle(self, nodeid: int) -> str | None:
        """The path node ``nodeid`` stands for when it is an old version this view handed out (a copy, or
        an inode no longer linked anywhere): writing through it is writing through a stale handle. None
        for any other node."""
        if not self._on:
            return None
        try:
            node = self.fs.node(nodeid)
        except OSError:
            return None
        with self._lock:
            if node.key in self._copies:
                return self._copies[node.key]
            if node.key not in self._kept:
                return None
        try:
            gone = os.fstat(node.fd).st_nlink == 0
        except OSError:
            return None
        return self.fs.path(nodeid) if gone else None

    # -- answers ----------------------------------------------------------------------
    def lookup(self, path: str, node: str | None) -> tuple[int, os.stat_result] | None:
        """What ``node`` finds at ``path`` through a stale cache: the old object (a node id and its
        attributes), or OSError(ENOENT) where nothing was there; None where the path is as it is (not
        changed since the view began, or changed by ``node`` itself)."""
        with self._lock:
            old = self._paths.get(path)
            if not self._on or old is None or node in old.changed_by or self._in_new_folder(path):
                return None
            if old.fd is None:
                raise OSError(errno.ENOENT, "not there when this node's cache was filled")
            fd = _reopen(old.fd)
        return self.fs.adopt(fd, path if old.copy else None)

    def _in_new_folder(self, path: str) -> bool:
        """Whether ``path`` lies in a folder made since the view began: nothing of it was cached then, so
        a node that sees the folder (it made it, or tried to) sees what is in it as it is."""
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            made = self._paths.get("/".join(parts[:depth]))
            if made is not None and made.fd is None:
                return True
        return False

    def listing(self, folder: str, entries: list[tuple[str, int, int]],
                node: str | None) -> tuple[list[tuple[str, int, int]], bool]:
        """``entries`` (name, inode, mode) of ``folder`` as ``node`` lists it through a stale cache: the
        names others changed since the view began, as they were then. Whether that differs."""
        prefix = f"{folder}/" if folder else ""
        with self._lock:
            if not self._on or (folder and self._in_new_folder(f"{folder}/")):
                return entries, False
            changed = {p[len(prefix):]: o for p, o in self._paths.items()
                       if p.startswith(prefix) and "/" not in p[len(prefix):] and node not in o.changed_by}
        if not changed:
            return entries, False
        out = [e for e in entries if e[0] not in changed]
        out += [(name, o.ino, stat.S_IFMT(o.mode)) for name, o in sorted(changed.items()) if o.fd is not None]
        return out, sorted(out) != sorted(entries)


def _reopen(fd: int) -> int:
    """A new ``O_PATH`` descriptor of what ``fd`` holds (linked or not: through its magic link, followed)."""
    return os.open(f"/proc/self/fd/{fd}", os.O_PATH | os.O_CLOEXEC)


def _copy_of(fd: int, st: os.stat_result, stash: Path) -> int:
    """A copy of the regular file ``fd`` (``O_PATH``) in an unnamed file under ``stash``: its bytes, mode and
    times. The descriptor of the copy (read-write)."""
    src = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            dst = os.open(stash, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except OSError:   # a file system without O_TMPFILE: a named file, unlinked at once
            made, name = tempfile.mkstemp(dir=stash, prefix=".stale-copy.")
            os.unlink(name)
            dst = made
        try:
            while chunk := os.read(src, _COPY_CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(dst, view):]
            os.fchmod(dst, stat.S_IMODE(st.st_mode))
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        except BaseException:
            os.close(dst)
            raise
        return dst
    finally:
        os.close(src)
