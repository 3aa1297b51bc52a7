"""The passthrough itself: the backing folder's files, served by node id and handle.

The kernel names files by node ids it got from us. Each node holds an
``O_PATH`` descriptor of its backing file, opened when the kernel first looked
it up, so every operation is a ``*at`` call relative to a descriptor and never a
path walk: the backing folder may be the mountpoint itself (the mount covers it,
our descriptors still reach under it), renames need no bookkeeping, and the
daemon never touches its own mount. A node is forgotten (its descriptor
closed) when the kernel's lookup count for it drops to zero.

Every method raises ``OSError`` with the errno the caller should see.
"""
from __future__ import annotations

import ctypes
import errno
import itertools
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from elastic_chaos.storagefs import proto

O_PATH = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_IGNORED = os.O_CREAT | os.O_EXCL | os.O_NOCTTY
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class Node:
    fd: int
    key: tuple[int, int]
    lookups: int


@dataclass
class Handle:
    """An open file or folder, with what the op log reports at flush and release."""

    fd: int
    nodeid: int
    path: str
    writable: bool
    pid: int | None
    opened_t: float
    is_dir: bool = False
    bytes_written: int = 0
    bytes_read: int = 0
    writes: int = 0
    stalled_s: float = 0.0
    rules: list[str] = field(default_factory=list)
    entries: list[tuple[str, int, int]] | None = None


def _proc(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


class Passthrough:
    """Node and handle tables over one backing folder; safe to call from many threads."""

    def __init__(self, backing: str) -> None:
        self.root_fd = os.open(backing, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.root_path = os.readlink(_proc(self.root_fd))
        st = os.fstat(self.root_fd)
        self._nodes: dict[int, Node] = {proto.ROOT_ID: Node(self.root_fd, (st.st_dev, st.st_ino), 1)}
        self._keys = {(st.st_dev, st.st_ino): proto.ROOT_ID}
        self._handles: dict[int, Handle] = {}
        self._aliases: dict[tuple[int, int], str] = {}
        """Inodes outside the backing folder served as a path inside it (a stale view's copies)."""
        self._ids = itertools.count(2)
        self._fhs = itertools.count(1)
        self._lock = threading.Lock()

    # -- tables ----------------------------------------------------------------------
    def node(self, nodeid: int) -> Node:
        with self._lock:
            try:
                return self._nodes[nodeid]
            except KeyError:
                raise OSError(errno.ESTALE, "unknown node") from None

    def handle(self, fh: int) -> Handle:
        with self._lock:
            try:
                return self._handles[fh]
            except KeyError:
                raise OSError(errno.EBADF, "unknown handle") from None

    def open_handles(self) -> int:
        with self._lock:
            return len(self._handles)

    def path(self, nodeid: int) -> str:
        """Where the node is now, inside the mount ('' for the root; best effort)."""
        try:
            node = self.node(nodeid)
            alias = self._aliases.get(node.key)
            if alias is not None:
                return alias
            where = os.readlink(_proc(node.fd))
        except OSError:
            return "?"
        where = where.removesuffix(" (deleted)")
        if where == self.root_path:
            return ""
        return where[len(self.root_path) + 1:] if where.startswith(self.root_path + "/") else where

    def child(self, parent: int, name: str) -> str:
        base = self.path(parent)
        return f"{base}/{name}" if base else name

    def _remember(self, fd: int) -> tuple[int, os.stat_result]:
        """A node for O_PATH ``fd`` (reusing the known one of its inode), one lookup more."""
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        with self._lock:
            known = self._keys.get(key)
            if known is not None:
                self._nodes[known].lookups += 1
                os.close(fd)
                return known, st
            nodeid = next(self._ids)
            self._nodes[nodeid] = Node(fd, key, 1)
            self._keys[key] = nodeid
            return nodeid, st

    def adopt(self, fd: int, alias: str | None = None) -> tuple[int, os.stat_result]:
        """A node for ``O_PATH`` descriptor ``fd`` (taken over) of an object that need not be linked in the
        backing folder (a stale view's old version), one lookup more; ``alias``: the path inside the mount
        it is served as, where it lies outside the folder."""
        nodeid, st = self._remember(fd)
        if alias is not None:
            with self._lock:
                self._aliases[(st.st_dev, st.st_ino)] = alias
        return nodeid, st

    def forget(self, nodeid: int, count: int) -> None:
        with self._lock:
            node = self._nodes.get(nodeid)
            if node is None or nodeid == proto.ROOT_ID:
                return
            node.lookups -= count
            if node.lookups <= 0:
                del self._nodes[nodeid]
                self._keys.pop(node.key, None)
                self._aliases.pop(node.key, None)
                os.close(node.fd)

    def _add_handle(self, fd: int, nodeid: int, path: str, writable: bool, pid: int | None,
                    is_dir: bool = False) -> int:
        with self._lock:
            fh = next(self._fhs)
            self._handles[fh] = Handle(fd, nodeid, path, writable, pid, time.time(), is_dir=is_dir)
            return fh

    def close_handle(self, fh: int) -> Handle | None:
        with self._lock:
            h = self._handles.pop(fh, None)
        if h is not None:
            os.close(h.fd)
        return h

    def close_all(self) -> None:
        with self._lock:
            fds = [h.fd for h in self._handles.values()] + [n.fd for n in self._nodes.values()]
            self._handles.clear()
            self._nodes.clear()
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass

    # -- names -----------------------------------------------------------------------
    def lookup(self, parent: int, name: str) -> tuple[int, os.stat_result]:
        return self._remember(os.open(name, O_PATH, dir_fd=self.node(parent).fd))

    def mkdir(self, parent: int, name: str, mode: int, uid: int, gid: int) -> tuple[int, os.stat_result]:
        pfd = self.node(parent).fd
        os.mkdir(name, mode, dir_fd=pfd)
        self._own(name, pfd, uid, gid)
        return self.lookup(parent, name)

    def mknod(self, parent: int, name: str, mode: int, rdev: int, uid: int, gid: int) -> tuple[int, os.stat_result]:
        pfd = self.node(parent).fd
        os.mknod(name, mode, rdev, dir_fd=pfd)
        self._own(name, pfd, uid, gid)
        return self.lookup(parent, name)

    def symlink(self, parent: int, name: str, target: str, uid: int, gid: int) -> tuple[int, os.stat_result]:
        pfd = self.node(parent).fd
        os.symlink(target, name, dir_fd=pfd)
        self._own(name, pfd, uid, gid)
        return self.lookup(parent, name)

    def link(self, nodeid: int, parent: int, name: str) -> tuple[int, os.stat_result]:
        os.link(_proc(self.node(nodeid).fd), name, dst_dir_fd=self.node(parent).fd, follow_symlinks=True)
        return self.lookup(parent, name)

    @staticmethod
    def _own(name: str, pfd: int, uid: int, gid: int) -> None:
        """Files made for a caller belong to the caller, as they would on a local disk."""
        if os.geteuid() == 0 and (uid, gid) != (0, 0):
            os.chown(name, uid, gid, dir_fd=pfd, follow_symlinks=False)

    def unlink(self, parent: int, name: str) -> None:
        os.unlink(name, dir_fd=self.node(parent).fd)

    def rmdir(self, parent: int, name: str) -> None:
        os.rmdir(name, dir_fd=self.node(parent).fd)

    def rename(self, parent: int, name: str, newparent: int, newname: str, flags: int = 0) -> None:
        src, dst = self.node(parent).fd, self.node(newparent).fd
        if flags == 0:
            os.rename(name, newname, src_dir_fd=src, dst_dir_fd=dst)
            return
        if _libc.renameat2(src, os.fsencode(name), dst, os.fsencode(newname), flags) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    def readlink(self, nodeid: int) -> str:
        return os.readlink("", dir_fd=self.node(nodeid).fd)

    # -- attributes ------------------------------------------------------------------
    def getattr(self, nodeid: int, fh: int | None = None) -> os.stat_result:
        return os.fstat(self.handle(fh).fd if fh is not None else self.node(nodeid).fd)

    def setattr(self, nodeid: int, body: bytes) -> os.stat_result:
        (valid, _pad, fh, size, _owner, atime, mtime, _ctime, atimens, mtimens, _ctimens, mode, _u4, uid, gid,
         _u5) = proto.SETATTR_IN.unpack_from(body)
        target: int | str = self.handle(fh).fd if valid & proto.FATTR_FH else _proc(self.node(nodeid).fd)
        if valid & proto.FATTR_MODE:
            os.chmod(target, stat.S_IMODE(mode))
        if valid & (proto.FATTR_UID | proto.FATTR_GID):
            os.chown(target, uid if valid & proto.FATTR_UID else -1, gid if valid & proto.FATTR_GID else -1)
        if valid & proto.FATTR_SIZE:
            os.truncate(target, size)
        if valid & (proto.FATTR_ATIME | proto.FATTR_MTIME | proto.FATTR_ATIME_NOW | proto.FATTR_MTIME_NOW):
            self._utime(target, valid, atime * 10**9 + atimens, mtime * 10**9 + mtimens)
        return self.getattr(nodeid, fh if valid & proto.FATTR_FH else None)

    @staticmethod
    def _utime(target: int | str, valid: int, atime_ns: int, mtime_ns: int) -> None:
        now, st = time.time_ns(), os.stat(target)
        a = now if valid & proto.FATTR_ATIME_NOW else atime_ns if valid & proto.FATTR_ATIME else st.st_atime_ns
        m = now if valid & proto.FATTR_MTIME_NOW else mtime_ns if valid & proto.FATTR_MTIME else st.st_mtime_ns
        os.utime(target, ns=(a, m))

    def statfs(self) -> os.statvfs_result:
        return os.fstatvfs(self.root_fd)

    # -- files -----------------------------------------------------------------------
    def open(self, nodeid: int, flags: int, path: str, pid: int | None) -> int:
        fd = os.open(_proc(self.node(nodeid).fd), (flags & ~_OPEN_IGNORED) | os.O_CLOEXEC)
        return self._add_handle(fd, nodeid, path, _writable(flags), pid)

    def create(self, parent: int, name: str, flags: int, mode: int, uid: int, gid: int, path: str,
               pid: int | None) -> tuple[int, os.stat_result, int]:
        fd = os.open(name, flags | os.O_CREAT | os.O_CLOEXEC, stat.S_IMODE(mode), dir_fd=self.node(parent).fd)
        try:
            if os.geteuid() == 0 and (uid, gid) != (0, 0):
                os.fchown(fd, uid, gid)
            nodeid, st = self._remember(os.open(_proc(fd), os.O_PATH | os.O_CLOEXEC))  # follows the magic link
        except OSError:
            os.close(fd)
            raise
        return nodeid, st, self._add_handle(fd, nodeid, path, _writable(flags), pid)

    def opendir(self, nodeid: int, path: str, pid: int | None) -> int:
        fd = os.open(_proc(self.node(nodeid).fd), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return self._add_handle(fd, nodeid, path, False, pid, is_dir=True)

    def readdir(self, fh: int, offset: int, size: int,
                adjust: Callable[[list[tuple[str, int, int]]], list[tuple[str, int, int]]] | None = None) -> bytes:
        """Entries of folder handle ``fh`` from ``offset`` on, as many as fit in ``size`` bytes. The folder
        is read at offset 0 (``adjust``: what the caller is shown of it instead, a stale view's)."""
        h = self.handle(fh)
        if h.entries is None or offset == 0:
            h.entries = self._list(h)
            if adjust is not None:
                h.entries = adjust(h.entries)
        out, used = [], 0
        for index in range(offset, len(h.entries)):
            name, ino, mode = h.entries[index]
            rec = proto.dirent(ino, index + 1, name, mode)
            if used + len(rec) > size:
                break
            out.append(rec)
            used += len(rec)
        return b"".join(out)

    @staticmethod
    def _list(h: Handle) -> list[tuple[str, int, int]]:
        me = os.fstat(h.fd).st_ino
        entries = [(".", me, stat.S_IFDIR), ("..", 0, stat.S_IFDIR)]
        with os.scandir(h.fd) as it:
            for e in it:
                kind = (stat.S_IFDIR if e.is_dir(follow_symlinks=False) else stat.S_IFLNK if e.is_symlink()
                        else stat.S_IFREG if e.is_file(follow_symlinks=False) else 0)
                entries.append((e.name, e.inode(), kind))
        return entries


def _writable(flags: int) -> bool:
    return flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR) or bool(flags & os.O_TRUNC)
