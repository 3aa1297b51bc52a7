"""The FUSE kernel protocol, as much of it as a passthrough needs (``linux/fuse.h``, 7.31).

The daemon speaks to the kernel through ``/dev/fuse`` itself instead of through
libfuse (docs/STORAGE.md says why): each ``read()`` of the device returns one
request (a 40-byte ``fuse_in_header`` and the opcode's body), and each
``write()`` of a reply (a 16-byte ``fuse_out_header`` and the opcode's
payload) answers one request by its ``unique`` number. This module holds the
opcodes, the struct layouts (little-endian, as x86-64 and arm64 both are), and
the packing helpers; nothing here touches a file.

Protocol 7.31 is what we announce: every struct below has its full size there
(no compat sizes), and the kernel sends no request extensions (those need
flags we never set).
"""
from __future__ import annotations

import enum
import errno
import os
import stat
import struct
from dataclasses import dataclass

MAJOR, MINOR = 7, 31
ROOT_ID = 1
MAX_WRITE = 1 << 20
"""Largest write the kernel may send in one request (with max_pages = 256)."""
BUFFER = MAX_WRITE + 64 * 1024
"""A read buffer for one request: the largest write plus its headers, with room to spare."""


class Opcode(enum.IntEnum):
    LOOKUP = 1
    FORGET = 2
    GETATTR = 3
    SETATTR = 4
    READLINK = 5
    SYMLINK = 6
    MKNOD = 8
    MKDIR = 9
    UNLINK = 10
    RMDIR = 11
    RENAME = 12
    LINK = 13
    OPEN = 14
    READ = 15
    WRITE = 16
    STATFS = 17
    RELEASE = 18
    FSYNC = 20
    SETXATTR = 21
    GETXATTR = 22
    LISTXATTR = 23
    REMOVEXATTR = 24
    FLUSH = 25
    INIT = 26
    OPENDIR = 27
    READDIR = 28
    RELEASEDIR = 29
    FSYNCDIR = 30
    ACCESS = 34
    CREATE = 35
    INTERRUPT = 36
    DESTROY = 38
    BATCH_FORGET = 42
    FALLOCATE = 43
    RENAME2 = 45
    LSEEK = 46


NO_REPLY = frozenset({Opcode.FORGET, Opcode.BATCH_FORGET, Opcode.INTERRUPT})

# INIT flags we accept when the kernel offers them
ASYNC_READ = 1 << 0
ATOMIC_O_TRUNC = 1 << 3
BIG_WRITES = 1 << 5
PARALLEL_DIROPS = 1 << 18
MAX_PAGES = 1 << 22
WANTED_INIT_FLAGS = ASYNC_READ | ATOMIC_O_TRUNC | BIG_WRITES | PARALLEL_DIROPS | MAX_PAGES

# setattr valid bits
FATTR_MODE, FATTR_UID, FATTR_GID, FATTR_SIZE = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FATTR_ATIME, FATTR_MTIME, FATTR_FH = 1 << 4, 1 << 5, 1 << 6
FATTR_ATIME_NOW, FATTR_MTIME_NOW = 1 << 7, 1 << 8
GETATTR_FH = 1 << 0
FSYNC_FDATASYNC = 1 << 0

IN_HEADER = struct.Struct("<IIQQIIIHH")
OUT_HEADER = struct.Struct("<IiQ")
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")
ENTRY_HEAD = struct.Struct("<QQQQII")
ATTR_HEAD = struct.Struct("<QII")
OPEN_OUT = struct.Struct("<QII")
WRITE_OUT = struct.Struct("<II")
STATFS_OUT = struct.Struct("<QQQQQIIII24x")
INIT_IN = struct.Struct("<IIII")
INIT_OUT = struct.Struct("<IIIIHHIIHHI28x")
GETATTR_IN = struct.Struct("<IIQ")
SETATTR_IN = struct.Struct("<IIQQQQQQIIIIIIII")
MKNOD_IN = struct.Struct("<IIII")
MKDIR_IN = struct.Struct("<II")
RENAME_IN = struct.Struct("<Q")
RENAME2_IN = struct.Struct("<QII")
LINK_IN = struct.Struct("<Q")
OPEN_IN = struct.Struct("<II")
CREATE_IN = struct.Struct("<IIII")
RELEASE_IN = struct.Struct("<QIIQ")
FLUSH_IN = struct.Struct("<QIIQ")
READ_IN = struct.Struct("<QQIIQII")
WRITE_IN = struct.Struct("<QQIIQII")
FSYNC_IN = struct.Struct("<QII")
INTERRUPT_IN = struct.Struct("<Q")
FORGET_IN = struct.Struct("<Q")
BATCH_FORGET_IN = struct.Struct("<II")
FORGET_ONE = struct.Struct("<QQ")
FALLOCATE_IN = struct.Struct("<QQQII")
LSEEK_IN = struct.Struct("<QQII")
LSEEK_OUT = struct.Struct("<Q")
DIRENT_HEAD = struct.Struct("<QQII")

ENTRY_TIMEOUT_S = 1
"""How long the kernel may cache a name and its attributes: every change goes through us."""


@dataclass(frozen=True)
class Request:
    """One request as read from the device: the header's fields and the body after it."""

    opcode: int
    unique: int
    nodeid: int
    uid: int
    gid: int
    tid: int
    """The calling *thread* (the kernel's task PID in the mount's PID namespace; 0 for the kernel)."""
    body: bytes

    @classmethod
    def parse(cls, data: bytes) -> Request:
        """Raises ValueError for a short or inconsistent request."""
        if len(data) < IN_HEADER.size:
            raise ValueError(f"short request: {len(data)} bytes")
        length, opcode, unique, nodeid, uid, gid, pid, _ext, _pad = IN_HEADER.unpack_from(data)
        if length != len(data):
            raise ValueError(f"request says {length} bytes, read {len(data)}")
        return cls(opcode, unique, nodeid, uid, gid, pid, data[IN_HEADER.size:])

    def names(self, offset: int, count: int) -> list[str]:
        """``count`` NUL-terminated names in the body from ``offset`` on."""
        parts = self.body[offset:].split(b"\0")
        if len(parts) <= count:
            raise OSError(errno.EINVAL, "request names are not NUL-terminated")
        return [os.fsdecode(p) for p in parts[:count]]


def attr(st: os.stat_result) -> bytes:
    """``fuse_attr`` of a stat result."""
    a_s, a_ns = divmod(st.st_atime_ns, 10**9)
    m_s, m_ns = divmod(st.st_mtime_ns, 10**9)
    c_s, c_ns = divmod(st.st_ctime_ns, 10**9)
    return ATTR.pack(st.st_ino, st.st_size, st.st_blocks, a_s, m_s, c_s, a_ns, m_ns, c_ns, st.st_mode,
                     st.st_nlink, st.st_uid, st.st_gid, st.st_rdev & 0xFFFFFFFF, st.st_blksize, 0)


def entry(nodeid: int, st: os.stat_result, valid_s: int = ENTRY_TIMEOUT_S) -> bytes:
    """``fuse_entry_out``: a name resolved to ``nodeid``, which the kernel may keep ``valid_s``."""
    return ENTRY_HEAD.pack(nodeid, 0, valid_s, valid_s, 0, 0) + attr(st)


def attr_out(st: os.stat_result, valid_s: int = ENTRY_TIMEOUT_S) -> bytes:
    return ATTR_HEAD.pack(valid_s, 0, 0) + attr(st)


def open_out(fh: int) -> bytes:
    return OPEN_OUT.pack(fh, 0, 0)


def statfs_out(st: os.statvfs_result) -> bytes:
    return STATFS_OUT.pack(st.f_blocks, st.f_bfree, st.f_bavail, st.f_files, st.f_ffree, st.f_bsize,
                           st.f_namemax, st.f_frsize, 0)


def dirent(ino: int, next_offset: int, name: str, mode: int) -> bytes:
    """One ``fuse_dirent``, padded to 8 bytes; ``mode``'s file type gives the entry type."""
    raw = os.fsencode(name)
    rec = DIRENT_HEAD.pack(ino, next_offset, len(raw), stat.S_IFMT(mode) >> 12) + raw
    return rec + b"\0" * (-len(rec) % 8)


def init_reply(kernel_flags: int) -> bytes:
    """The answer to INIT: 7.31, synchronous writes of up to 1 MiB, readahead up to 1 MiB
    (the kernel lowers it to its own limit), no writeback cache."""
    return INIT_OUT.pack(MAJOR, MINOR, MAX_WRITE, kernel_flags & WANTED_INIT_FLAGS, 0, 0, MAX_WRITE, 1,
                         MAX_WRITE // 4096, 0, 0)


def reply(fd: int, unique: int, payload: bytes = b"", error: int = 0) -> None:
    """Answer request ``unique`` (``error``: a positive errno, or 0 with ``payload``). A
    request the kernel gave up on (its caller gone, the connection aborted) is ignored."""
    body = b"" if error else payload
    header = OUT_HEADER.pack(OUT_HEADER.size + len(body), -error, unique)
    try:
        os.writev(fd, [header, body] if body else [header])
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENODEV, errno.ECONNABORTED):
            raise
