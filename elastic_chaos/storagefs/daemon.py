"""The storage daemon: one process serving one mount, apart from the runner.

Run as ``python -m elastic_chaos.storagefs --backing DIR --mountpoint DIR
--control SOCK --log OPS --source NAME`` (the controller,
:class:`~elastic_chaos.storagefs.controller.StorageFs`, starts it). It lives
apart so that the runner is never in the kernel's I/O path: a held op blocks
its caller and one of our threads, never the runner.

Its life: open the backing folder (before the mount covers it) and
``/dev/fuse``, mount, serve with a few reader threads, answer the control
socket. It stops when its stdin reaches end-of-file (the controller closed it,
or died however it died: this pipe is the lifeline), on SIGTERM or a ``stop``
request, or when the kernel ends the connection (unmounted from outside). Then
it clears every rule (held ops go on), unmounts (lazily when files are still
open: they finish through the detached mount), serves until the last of them is
released or ``--linger-s`` passed, and exits. Its exit closes ``/dev/fuse``,
which fails whatever is still waiting with ENOTCONN: nothing stays blocked.
"""
from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from elastic_chaos.storagefs import mounts, proto
from elastic_chaos.storagefs.control import ControlServer
from elastic_chaos.storagefs.engine import Engine
from elastic_chaos.storagefs.fs import Passthrough
from elastic_chaos.storagefs.oplog import OpLog
from elastic_chaos.storagefs.server import Server
from elastic_chaos.storagefs.stale import StaleView

log = logging.getLogger("elastic_chaos.storagefs.daemon")
_INLINE = frozenset({proto.Opcode.INTERRUPT, proto.Opcode.FORGET, proto.Opcode.BATCH_FORGET, proto.Opcode.INIT})


class Daemon:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.mountpoint = os.path.realpath(args.mountpoint)
        self.oplog = OpLog(Path(args.log))
        self.engine = Engine(self.oplog)
        self.fs = Passthrough(args.backing)
        self.fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        self.view = StaleView(self.fs, Path(args.log).parent)   # copies of rewritten files: beside the op log
        self.engine.on_stale = self.view.switch
        self.server = Server(self.fd, self.fs, self.engine, self.oplog, self.view)
        self.pool = ThreadPoolExecutor(max_workers=args.workers, thread_name_prefix="op")
        self.stop = threading.Event()
        self.ended = threading.Event()
        self.control: ControlServer | None = None

    def run(self) -> int:
        mounts.mount_fuse(self.fd, self.args.source, self.mountpoint)
        self.oplog.write(t=time.time(), op="mount", path=self.mountpoint, pid=os.getpid(), detail=self.args.source)
        for i in range(self.args.threads):
            threading.Thread(target=self._read, name=f"reader-{i}", daemon=True).start()
        self.control = ControlServer(Path(self.args.control), self.engine, self.status, self.stop.set)
        threading.Thread(target=self._lifeline, name="lifeline", daemon=True).start()
        while not (self.stop.is_set() or self.ended.is_set()):
            self.stop.wait(0.5)
        return self.shutdown()

    def status(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "initialized": self.server.initialized.is_set(),
                "open_handles": self.fs.open_handles(), "mountpoint": self.mountpoint}

    def _lifeline(self) -> None:
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except OSError:
            pass
        self.stop.set()

    def _read(self) -> None:
        buf = bytearray(proto.BUFFER)  # one per reader: no megabyte allocation per request
        view = memoryview(buf)
        while True:
            try:
                data = bytes(view[:os.readv(self.fd, [buf])])
            except OSError as exc:
                if exc.errno in (errno.EINTR, errno.EAGAIN, errno.ENOENT):
                    continue
                self.ended.set()  # ENODEV: unmounted and every file closed, or aborted
                return
            try:
                req = proto.Request.parse(data)
            except ValueError as exc:
                log.error("dropping a malformed request: %s", exc)
                continue
            if req.opcode in _INLINE or not self.engine.busy():
                self.server.serve(req)
            else:
                self.pool.submit(self.server.serve, req)  # it may wait: keep the reader free

    def shutdown(self) -> int:
        """Clear rules, unmount, serve what is still open (bounded), exit code."""
        self.engine.close()
        if self.control is not None:
            self.control.close()
            mounts.remove_socket_folder(str(self.control.path.parent))  # a SIGKILLed controller cannot
        code = 0
        try:
            busy = self._unmount()
        except OSError as exc:
            log.error("could not unmount %s: %s", self.mountpoint, exc)
            busy, code = False, 1
        if busy and not self.ended.wait(self.args.linger_s):
            log.warning("files still open on the detached mount after %ss; exiting (they get ENOTCONN)",
                        self.args.linger_s)
        self.oplog.write(t=time.time(), op="unmount", path=self.mountpoint, pid=os.getpid(),
                         detail="lazy" if busy else None)
        self.oplog.close()
        return code

    def _unmount(self) -> bool:
        """Unmount ours; True when it had to be detached lazily (files still open)."""
        if mounts.find(self.mountpoint, self.args.source) is None:
            return False
        try:
            mounts.umount(self.mountpoint)
            return False
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise
        mounts.umount(self.mountpoint, lazy=True)
        return self.fs.open_handles() > 0


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m elastic_chaos.storagefs",
                                description="serve BACKING at MOUNTPOINT through FUSE, with fault rules")
    p.add_argument("--backing", required=True, help="the folder whose files are served (may be the mountpoint)")
    p.add_argument("--mountpoint", required=True)
    p.add_argument("--control", required=True, help="unix socket path for the control channel")
    p.add_argument("--log", required=True, help="op log (JSON lines), outside the mount")
    p.add_argument("--source", required=True, help=f"mount source, {mounts.SOURCE_PREFIX}<hex token>")
    p.add_argument("--threads", type=int, default=4, help="reader threads")
    p.add_argument("--workers", type=int, default=64, help="threads for ops that may wait on a rule")
    p.add_argument("--linger-s", type=float, default=30.0, help="serve open files this long after unmounting")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s storagefs %(levelname)s %(message)s")
    os.umask(0)  # the kernel applied the caller's umask already
    os.chdir("/")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the controller's to handle
    try:
        daemon = Daemon(args)
    except OSError as exc:
        print(f"storagefs: cannot start: {exc}", file=sys.stderr, flush=True)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop.set())
    try:
        code = daemon.run()
    except OSError as exc:
        print(f"storagefs: {exc}", file=sys.stderr, flush=True)
        daemon.engine.close()
        code = 2
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # reader threads blocked in read(/dev/fuse) are not joined
