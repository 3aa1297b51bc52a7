"""One request in, one reply out: each opcode's handler, with the rules and the op log.

Every handler builds the op's context (its kind, its path inside the mount, the
calling thread), lets the :class:`~elastic_chaos.storagefs.engine.Engine` hold,
slow or fail it, does it on the backing folder
(:class:`~elastic_chaos.storagefs.fs.Passthrough`) and says what it did in the
op log when the op is interesting (see :mod:`~elastic_chaos.storagefs.oplog`).
While a stale-read rule is on, each change first tells the
:class:`~elastic_chaos.storagefs.stale.StaleView` (what the path held, who changed
it), and the lookups and listings of the callers the rule covers are answered from
it. An injected error and an op whose caller was killed while it waited are
answered like any failure: the errno (EINTR for the killed caller, who never
sees it), the op not done.
"""
from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from elastic_chaos.storagefs import proto
from elastic_chaos.storagefs.callers import node_of
from elastic_chaos.storagefs.engine import CallerGone, Engine, Injected, OpCtx
from elastic_chaos.storagefs.fs import Handle, Passthrough
from elastic_chaos.storagefs.oplog import OpLog
from elastic_chaos.storagefs.proto import Opcode, Request
from elastic_chaos.storagefs.rules import Kind, SavePoint
from elastic_chaos.storagefs.stale import VALID_S, StaleView

log = logging.getLogger(__name__)
T = TypeVar("T")
_ALWAYS_LOGGED = frozenset({Kind.CREATE, Kind.MKDIR, Kind.RMDIR, Kind.UNLINK, Kind.RENAME, Kind.LINK, Kind.SYMLINK,
                            Kind.MKNOD, Kind.SETATTR, Kind.FSYNC, Kind.FSYNCDIR, Kind.FALLOCATE})


def _ename(err: int) -> str:
    return errno.errorcode.get(err, str(err))


class Server:
    def __init__(self, fuse_fd: int, fs: Passthrough, engine: Engine, oplog: OpLog, view: StaleView) -> None:
        self.fd, self.fs, self.engine, self.oplog, self.view = fuse_fd, fs, engine, oplog, view
        self.initialized = threading.Event()
        self._handlers: dict[int, Callable[[Request], bytes]] = {
            Opcode.INIT: self._init, Opcode.DESTROY: lambda r: b"", Opcode.LOOKUP: self._lookup,
            Opcode.GETATTR: self._getattr, Opcode.SETATTR: self._setattr, Opcode.READLINK: self._readlink,
            Opcode.SYMLINK: self._symlink, Opcode.MKNOD: self._mknod, Opcode.MKDIR: self._mkdir,
            Opcode.UNLINK: self._unlink, Opcode.RMDIR: self._rmdir, Opcode.RENAME: self._rename,
            Opcode.RENAME2: self._rename, Opcode.LINK: self._link, Opcode.OPEN: self._open,
            Opcode.CREATE: self._create, Opcode.READ: self._read, Opcode.WRITE: self._write,
            Opcode.STATFS: self._statfs, Opcode.FLUSH: self._flush, Opcode.RELEASE: self._release,
            Opcode.FSYNC: self._fsync, Opcode.OPENDIR: self._opendir, Opcode.READDIR: self._readdir,
            Opcode.RELEASEDIR: self._releasedir, Opcode.FSYNCDIR: self._fsync, Opcode.FALLOCATE: self._fallocate,
            Opcode.LSEEK: self._lseek,
        }

    def serve(self, req: Request) -> None:
        """Handle ``req`` and reply (nothing for FORGET and INTERRUPT). Never raises."""
        if req.opcode == Opcode.INTERRUPT:
            self.engine.poke()
        elif req.opcode == Opcode.FORGET:
            self.fs.forget(req.nodeid, proto.FORGET_IN.unpack_from(req.body)[0])
        elif req.opcode == Opcode.BATCH_FORGET:
            count = proto.BATCH_FORGET_IN.unpack_from(req.body)[0]
            for i in range(count):
                self.fs.forget(*proto.FORGET_ONE.unpack_from(req.body, proto.BATCH_FORGET_IN.size + 16 * i))
        else:
            self._answer(req)

    def _answer(self, req: Request) -> None:
        handler = self._handlers.get(req.opcode)
        try:
            if handler is None:
                raise OSError(errno.ENOSYS, "not supported")
            proto.reply(self.fd, req.unique, handler(req))
        except OSError as exc:
            proto.reply(self.fd, req.unique, error=exc.errno or errno.EIO)
        except Exception:  # noqa: BLE001 - a bug in one handler must not take the mount down
            log.exception("request %s failed", req.opcode)
            proto.reply(self.fd, req.unique, error=errno.EIO)

    # -- the one path every ruled op takes -------------------------------------------------
    def _op(self, ctx: OpCtx, do: Callable[[], T], *, logged: bool = False, quiet: bool = False,
            undo: Callable[[T], None] | None = None, note: Callable[[T], dict[str, object]] | None = None) -> T:
        """Gate ``ctx``, ``do`` it, hold it at an after-point; log it when ``logged`` or a rule
        touched it (``quiet``: only when it failed by a rule or lost its caller; reads and
        writes are summed on their handle instead). ``undo`` takes back a done op whose
        caller was killed while it was held after it."""
        t0, m0 = time.time(), time.monotonic()
        error: str | None = None
        injected = False
        extra: dict[str, object] = {}
        done = False
        try:
            self.engine.gate(ctx)
            result = do()
            done = True
            extra = note(result) if note else {}
            try:
                self.engine.after(ctx)
            except CallerGone:
                if undo is not None:
                    undo(result)
                raise
            return result
        except Injected as exc:
            error, injected = _ename(exc.errno), True
            ctx.touched(exc.rule)
            raise OSError(exc.errno, os.strerror(exc.errno)) from None
        except CallerGone:
            error = "EINTR"
            extra["detail"] = ("its caller was killed while held after the op (the op was done)" if done else
                               "its caller was killed while the op waited (the op was not done)")
            raise OSError(errno.EINTR, "caller killed") from None
        except OSError as exc:
            error = _ename(exc.errno or errno.EIO)
            raise
        finally:
            if logged or injected or error == "EINTR" or (ctx.rules and not quiet):
                if ctx.fh is not None:
                    extra.setdefault("fh", ctx.fh)
                self.oplog.write(t=t0, dur=time.monotonic() - m0, op=ctx.kind.value, path=ctx.path, dst=ctx.dst,
                                 pid=ctx.pid, tid=ctx.tid, node=ctx.node, stalled_s=ctx.stalled_s or None,
                                 rule=",".join(ctx.rules) or None, error=error, injected=injected or None, **extra)

    def _ctx(self, kind: Kind, req: Request, path: str, **kw: object) -> OpCtx:
        return OpCtx(kind, path, req.tid, **kw)  # type: ignore[arg-type]

    # -- handlers ----------------------------------------------------------------------
    def _init(self, req: Request) -> bytes:
        major, _minor, _readahead, flags = proto.INIT_IN.unpack_from(req.body)
        if major != proto.MAJOR:
            raise OSError(errno.EPROTO, f"FUSE protocol {major} is not 7")
        self.initialized.set()
        return proto.init_reply(flags)

    def _valid(self) -> int:
        """How long the kernel may cache a name or attributes: not at all while a stale view is on
        (each caller is answered its own view on every path walk)."""
        return VALID_S if self.view.on else proto.ENTRY_TIMEOUT_S

    def _entry(self, found: tuple[int, os.stat_result]) -> bytes:
        return proto.entry(*found, valid_s=self._valid())

    def _lookup(self, req: Request) -> bytes:
        (name,) = req.names(0, 1)
        ctx = self._ctx(Kind.LOOKUP, req, self.fs.child(req.nodeid, name))
        stale = self.engine.stale(ctx)
        return self._entry(self._op(ctx, lambda: self._stale_lookup(ctx, stale) or self.fs.lookup(req.nodeid, name)))

    def _stale_lookup(self, ctx: OpCtx, rule: str | None) -> tuple[int, os.stat_result] | None:
        """What a caller behind stale-read ``rule`` finds at ``ctx.path`` (None: the path as it is). An
        answer from the stale view is noted on ``ctx`` (the op log says so)."""
        if rule is None:
            return None
        try:
            found = self.view.lookup(ctx.path, ctx.node)
        except FileNotFoundError:
            raise Injected(errno.ENOENT, rule) from None
        if found is not None:
            ctx.touched(rule)
        return found

    def _changing(self, ctx: OpCtx, parent: int, name: str, path: str, *, copy: bool = False) -> None:
        """Tell the stale view ``ctx``'s caller is about to change ``path`` (``name`` in ``parent``)."""
        if self.engine.tracked(path):
            self.view.before_change(parent, name, path, ctx.node, copy=copy)

    def _rewriting(self, ctx: OpCtx, nodeid: int) -> None:
        """``ctx``'s caller is about to rewrite node ``nodeid`` in place (an open for writing, a setattr):
        ESTALE through an old version a stale view handed out (the caller's node sees the path afresh
        from then on), else the stale view keeps a copy of its bytes first."""
        if not self.view.on:
            return
        stale = self.view.stale_handle(nodeid)
        if stale is not None:
            self.view.refresh(stale, ctx.node)
            raise OSError(errno.ESTALE, "a stale file handle: the file was replaced or removed since this node's "
                                        "cache was filled")
        if self.engine.tracked(ctx.path):
            self.view.before_node_change(nodeid, ctx.path, ctx.node)

    def _getattr(self, req: Request) -> bytes:
        flags, _dummy, fh = proto.GETATTR_IN.unpack_from(req.body)
        ctx = self._ctx(Kind.GETATTR, req, self.fs.path(req.nodeid))
        st = self._op(ctx, lambda: self.fs.getattr(req.nodeid, fh if flags & proto.GETATTR_FH else None))
        return proto.attr_out(st, self._valid())

    def _setattr(self, req: Request) -> bytes:
        ctx = self._ctx(Kind.SETATTR, req, self.fs.path(req.nodeid))

        def do() -> os.stat_result:
            self._rewriting(ctx, req.nodeid)
            return self.fs.setattr(req.nodeid, req.body)
        return proto.attr_out(self._op(ctx, do, logged=True), self._valid())

    def _readlink(self, req: Request) -> bytes:
        ctx = self._ctx(Kind.READLINK, req, self.fs.path(req.nodeid))
        return os.fsencode(self._op(ctx, lambda: self.fs.readlink(req.nodeid)))

    def _made(self, kind: Kind, req: Request, name: str, make: Callable[[], tuple[int, os.stat_result]]) -> bytes:
        ctx = self._ctx(kind, req, self.fs.child(req.nodeid, name))

        def do() -> tuple[int, os.stat_result]:
            self._changing(ctx, req.nodeid, name, ctx.path)
            return make()
        return self._entry(self._op(ctx, do, logged=True))

    def _symlink(self, req: Request) -> bytes:
        name, target = req.names(0, 2)
        return self._made(Kind.SYMLINK, req, name,
                          lambda: self.fs.symlink(req.nodeid, name, target, req.uid, req.gid))

    def _mknod(self, req: Request) -> bytes:
        mode, rdev, _umask, _pad = proto.MKNOD_IN.unpack_from(req.body)
        (name,) = req.names(proto.MKNOD_IN.size, 1)
        return self._made(Kind.MKNOD, req, name,
                          lambda: self.fs.mknod(req.nodeid, name, mode, rdev, req.uid, req.gid))

    def _mkdir(self, req: Request) -> bytes:
        mode, _umask = proto.MKDIR_IN.unpack_from(req.body)
        (name,) = req.names(proto.MKDIR_IN.size, 1)
        return self._made(Kind.MKDIR, req, name, lambda: self.fs.mkdir(req.nodeid, name, mode, req.uid, req.gid))

    def _link(self, req: Request) -> bytes:
        (old,) = proto.LINK_IN.unpack_from(req.body)
        (name,) = req.names(proto.LINK_IN.size, 1)
        return self._made(Kind.LINK, req, name, lambda: self.fs.link(old, req.nodeid, name))

    def _unlink(self, req: Request) -> bytes:
        (name,) = req.names(0, 1)
        ctx = self._ctx(Kind.UNLINK, req, self.fs.child(req.nodeid, name))

        def do() -> None:
            self._changing(ctx, req.nodeid, name, ctx.path)
            self.fs.unlink(req.nodeid, name)
        self._op(ctx, do, logged=True)
        return b""

    def _rmdir(self, req: Request) -> bytes:
        (name,) = req.names(0, 1)
        ctx = self._ctx(Kind.RMDIR, req, self.fs.child(req.nodeid, name))

        def do() -> None:
            self._changing(ctx, req.nodeid, name, ctx.path)
            self.fs.rmdir(req.nodeid, name)
        self._op(ctx, do, logged=True)
        return b""

    def _rename(self, req: Request) -> bytes:
        if req.opcode == Opcode.RENAME2:
            newdir, flags, _pad = proto.RENAME2_IN.unpack_from(req.body)
            offset = proto.RENAME2_IN.size
        else:
            (newdir,), flags, offset = proto.RENAME_IN.unpack_from(req.body), 0, proto.RENAME_IN.size
        old, new = req.names(offset, 2)
        dst = self.fs.child(newdir, new)
        ctx = self._ctx(Kind.RENAME, req, self.fs.child(req.nodeid, old), dst=dst)

        def do() -> None:
            self._changing(ctx, req.nodeid, old, ctx.path)
            self._changing(ctx, newdir, new, dst)
            self.fs.rename(req.nodeid, old, newdir, new, flags)
        self._op(ctx, do, logged=True)
        return b""

    def _open(self, req: Request) -> bytes:
        flags, _open_flags = proto.OPEN_IN.unpack_from(req.body)
        path = self.fs.path(req.nodeid)
        writes = bool(flags & os.O_ACCMODE) or bool(flags & os.O_TRUNC)
        ctx = self._ctx(Kind.OPEN, req, path, writes_data=writes)

        def do() -> int:
            if writes:
                self._rewriting(ctx, req.nodeid)
            return self.fs.open(req.nodeid, flags, path, ctx.pid)
        fh = self._op(ctx, do, logged=writes,
                      undo=lambda fh: self._drop_handle(fh), note=lambda fh: {"fh": fh})
        return proto.open_out(fh)

    def _create(self, req: Request) -> bytes:
        flags, mode, _umask, _open_flags = proto.CREATE_IN.unpack_from(req.body)
        (name,) = req.names(proto.CREATE_IN.size, 1)
        path = self.fs.child(req.nodeid, name)
        ctx = self._ctx(Kind.CREATE, req, path, writes_data=True)

        def undo(made: tuple[int, os.stat_result, int]) -> None:
            self._drop_handle(made[2])
            self.fs.forget(made[0], 1)

        def do() -> tuple[int, os.stat_result, int]:
            self._changing(ctx, req.nodeid, name, path, copy=True)
            return self.fs.create(req.nodeid, name, flags, mode, req.uid, req.gid, path, ctx.pid)
        nodeid, st, fh = self._op(ctx, do, logged=True, undo=undo, note=lambda made: {"fh": made[2]})
        return self._entry((nodeid, st)) + proto.open_out(fh)

    def _drop_handle(self, fh: int) -> None:
        self.fs.close_handle(fh)

    def _read(self, req: Request) -> bytes:
        fh, offset, size, *_ = proto.READ_IN.unpack_from(req.body)
        h = self.fs.handle(fh)
        ctx = self._ctx(Kind.READ, req, h.path, size=size, fh=fh)
        try:
            data = self._op(ctx, lambda: os.pread(h.fd, size, offset), quiet=True)
        finally:
            self._account(h, ctx)
        h.bytes_read += len(data)
        return data

    def _write(self, req: Request) -> bytes:
        fh, offset, size, *_ = proto.WRITE_IN.unpack_from(req.body)
        data = memoryview(req.body)[proto.WRITE_IN.size:proto.WRITE_IN.size + size]
        h = self.fs.handle(fh)
        ctx = self._ctx(Kind.WRITE, req, h.path, size=size, written=h.bytes_written, fh=fh)
        try:
            done = self._op(ctx, lambda: self._write_through(ctx, h.fd, data, offset), quiet=True)
        finally:
            self._account(h, ctx)
        h.bytes_written += done
        h.writes += 1
        return proto.WRITE_OUT.pack(done, 0)

    def _write_through(self, ctx: OpCtx, fd: int, data: memoryview, offset: int) -> int:
        """Write what the rules allow of ``data``; at a mid-write point, the prefix, the pause,
        then the rest (a killed caller's rest is never written)."""
        data = data if ctx.limit is None else data[:ctx.limit]
        if ctx.cut is None:
            return os.pwrite(fd, data, offset)
        return self._split_write(ctx, fd, data, offset, *ctx.cut)

    def _split_write(self, ctx: OpCtx, fd: int, data: memoryview, offset: int, cut: int, rule: str) -> int:
        done = os.pwrite(fd, data[:cut], offset) if cut else 0
        ctx.written += done
        self.engine.hold(ctx, SavePoint.MID_WRITE, rule)
        return done + (os.pwrite(fd, data[cut:], offset + cut) if cut < len(data) else 0)

    @staticmethod
    def _account(h: Handle, ctx: OpCtx) -> None:
        h.stalled_s += ctx.stalled_s
        h.rules += [r for r in ctx.rules if r not in h.rules]

    def _statfs(self, req: Request) -> bytes:
        ctx = self._ctx(Kind.STATFS, req, "")
        return proto.statfs_out(self._op(ctx, self.fs.statfs))

    def _flush(self, req: Request) -> bytes:
        fh, *_ = proto.FLUSH_IN.unpack_from(req.body)
        h = self.fs.handle(fh)
        ctx = self._ctx(Kind.FLUSH, req, h.path, fh=fh)
        self._op(ctx, lambda: None, logged=h.writable,
                 note=lambda _: {"fh": fh, "bytes": h.bytes_written, "writes": h.writes})
        return b""

    def _release(self, req: Request) -> bytes:
        fh, *_ = proto.RELEASE_IN.unpack_from(req.body)
        h = self.fs.close_handle(fh)
        if h is not None and (h.writable or h.stalled_s):
            self.oplog.write(t=time.time(), op="release", path=h.path, pid=h.pid, node=node_of(h.pid), fh=fh,
                             bytes=h.bytes_written,
                             writes=h.writes, stalled_s=h.stalled_s or None, rule=",".join(h.rules) or None,
                             detail=f"open {time.time() - h.opened_t:.3f}s")
        return b""

    def _fsync(self, req: Request) -> bytes:
        fh, flags, _pad = proto.FSYNC_IN.unpack_from(req.body)
        h = self.fs.handle(fh)
        kind = Kind.FSYNCDIR if req.opcode == Opcode.FSYNCDIR else Kind.FSYNC
        ctx = self._ctx(kind, req, h.path, fh=fh)
        sync = os.fdatasync if flags & proto.FSYNC_FDATASYNC else os.fsync
        self._op(ctx, lambda: sync(h.fd), logged=True, note=lambda _: {"fh": fh})
        return b""

    def _opendir(self, req: Request) -> bytes:
        path = self.fs.path(req.nodeid)
        ctx = self._ctx(Kind.OPENDIR, req, path)
        return proto.open_out(self._op(ctx, lambda: self.fs.opendir(req.nodeid, path, ctx.pid),
                                       undo=self._drop_handle))

    def _readdir(self, req: Request) -> bytes:
        fh, offset, size, *_ = proto.READ_IN.unpack_from(req.body)
        ctx = self._ctx(Kind.READDIR, req, self.fs.handle(fh).path)
        stale = self.engine.stale(ctx, any_path=True) if offset == 0 else None

        def adjust(entries: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
            shown, differs = self.view.listing(ctx.path, entries, ctx.node)
            if differs and stale is not None:
                ctx.touched(stale)
            return shown
        return self._op(ctx, lambda: self.fs.readdir(fh, offset, size, adjust if stale is not None else None))

    def _releasedir(self, req: Request) -> bytes:
        fh, *_ = proto.RELEASE_IN.unpack_from(req.body)
        self.fs.close_handle(fh)
        return b""

    def _fallocate(self, req: Request) -> bytes:
        fh, offset, length, mode, _pad = proto.FALLOCATE_IN.unpack_from(req.body)
        if mode != 0:
            raise OSError(errno.EOPNOTSUPP, "only plain fallocate")
        h = self.fs.handle(fh)
        ctx = self._ctx(Kind.FALLOCATE, req, h.path, size=length, fh=fh)
        self._op(ctx, lambda: os.posix_fallocate(h.fd, offset, length), logged=True)
        return b""

    def _lseek(self, req: Request) -> bytes:
        fh, offset, whence, _pad = proto.LSEEK_IN.unpack_from(req.body)
        h = self.fs.handle(fh)
        return proto.LSEEK_OUT.pack(os.lseek(h.fd, offset, whence))
