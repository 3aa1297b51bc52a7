"""inotify through libc (ctypes): the kernel's word on what happened to files in a folder.

Polling a file's signature (watchers/checkpoints.py) says that it changed, not how: how many
processes had it open, whether it was written in place or renamed into place. inotify says so,
in order. Used by elastic_chaos.watchers.writers to see more than one writer of a checkpoint path; no
dependency (ctypes on the C library), Linux only.

Two identical events in a row (same watch, mask, cookie and name) reach the queue as one: two
processes opening one file back to back leave one IN_OPEN in the directory's watch. Watching
the file itself as well (``add(path, FILE_MASK)``) reports each of its events twice, once per
watch, so consecutive events of the file are never identical and none is lost to that merge.

Where inotify cannot watch, callers fall back: ``Inotify()`` raises OSError off Linux, without
the libc symbol or past the per-user instance limit; ``add`` raises it past the watch limit
(ENOSPC). ``remote`` names filesystems that other machines write into without this kernel's
knowledge (NFS and the like): inotify watches them and misses those writes.
"""
from __future__ import annotations

import ctypes
import errno
import os
import re
import struct
import sys
import weakref
from pathlib import Path
from typing import NamedTuple

IN_OPEN, IN_CLOSE_WRITE, IN_CLOSE_NOWRITE = 0x20, 0x08, 0x10
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE = 0x40, 0x80, 0x100
IN_Q_OVERFLOW, IN_IGNORED, IN_ISDIR = 0x4000, 0x8000, 0x40000000
IN_ONLYDIR, IN_EXCL_UNLINK = 0x01000000, 0x04000000
FOLDER_MASK = (IN_OPEN | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE
               | IN_ONLYDIR | IN_EXCL_UNLINK)
"""A watched folder's events; IN_EXCL_UNLINK: none of a file once it is unlinked (replaced)."""
FILE_MASK = IN_OPEN | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE
"""A watched file's own events: its folder's, again, so that none merges with the one before."""
_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name
REMOTE = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "9p", "afs",
                    "beegfs", "virtiofs", "orangefs", "gfs2", "ocfs2", "fuse"})
"""Filesystems another machine writes into without this kernel seeing it (FUSE: whatever its backend)."""


class Raw(NamedTuple):
    """One inotify event as read (``name``: empty for an event of a watched file itself)."""

    wd: int
    mask: int
    cookie: int
    name: str


class Inotify:
    """One inotify instance (non-blocking, close-on-exec). OSError from the constructor where none
    can be made. ``close()`` is idempotent, and runs when the instance is collected."""

    def __init__(self) -> None:
        self._libc = _libc()
        fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise _oserror("inotify_init1")
        self.fd: int = fd
        self._close = weakref.finalize(self, os.close, fd)

    def add(self, path: Path, mask: int = FOLDER_MASK) -> int:
        """Watch ``path`` (one already watched: the same descriptor); OSError where it cannot be
        (ENOENT: gone; ENOTDIR: a file for FOLDER_MASK; ENOSPC: the per-user watch limit)."""
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            raise _oserror(f"inotify_add_watch {path}")
        return int(wd)

    def remove(self, wd: int) -> None:
        """Stop watching; a descriptor already gone (its file deleted) is no error."""
        self._libc.inotify_rm_watch(self.fd, wd)

    def read(self) -> list[Raw]:
        """Every event queued since the last read, in order; returns at once."""
        out: list[Raw] = []
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                return out
            if not chunk:
                return out
            out.extend(parse(chunk))

    def close(self) -> None:
        self._close()


def parse(buf: bytes) -> list[Raw]:
    """The events in one read() of an inotify descriptor."""
    out, i = [], 0
    while i + _HEADER.size <= len(buf):
        wd, mask, cookie, length = _HEADER.unpack_from(buf, i)
        name = buf[i + _HEADER.size:i + _HEADER.size + length].split(b"\0", 1)[0]
        out.append(Raw(wd, mask, cookie, os.fsdecode(name)))
        i += _HEADER.size + length
    return out


def _libc() -> ctypes.CDLL:
    if not sys.platform.startswith("linux"):
        raise OSError(errno.ENOSYS, f"inotify is Linux only (this is {sys.platform})")
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "inotify_init1"):
        raise OSError(errno.ENOSYS, "this C library has no inotify_init1")
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    return libc


def _oserror(what: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {os.strerror(code)}")


MOUNTINFO = Path("/proc/self/mountinfo")
_OCTAL = re.compile(r"\\([0-7]{3})")


def filesystem(path: Path, mountinfo: Path = MOUNTINFO) -> str | None:
    """The type of the filesystem ``path`` is on (the mount point nearest above it); None when the
    mount table cannot be read."""
    real = os.path.realpath(path)
    best, kind = "", None
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, after = left.split(), right.split()
        if len(fields) < 5 or not after:
            continue
        point = _OCTAL.sub(lambda m: chr(int(m[1], 8)), fields[4])  # the table writes a space as \040
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
            best, kind = point, after[0]
    return kind


def remote(kind: str | None) -> bool:
    """Whether a filesystem of this type (``fuse.sshfs``: fuse) takes writes inotify does not see."""
    return kind is not None and kind.split(".", 1)[0] in REMOTE
