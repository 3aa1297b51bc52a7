"""The controller: mount a faulty-on-demand filesystem over a folder, drive it, take it down.

``StorageFs(folder).mount()`` starts the daemon
(:mod:`~elastic_chaos.storagefs.daemon`) that serves ``folder``'s own files
at ``folder`` (or another backing folder's), so every process that opens a path
under it, torch's writer included, goes through the kernel's FUSE path and meets
the rules this object sets. Nothing about the writer changes.

The daemon's stdin is a pipe only this object holds: when this process exits,
however it exits (SIGKILL included), the daemon sees end-of-file, clears its
rules, unmounts and exits. A run that records the mount in its ledger (the
local platform's run record, :class:`~elastic_chaos.storagefs.mounts.MountLedger`)
also has its watchdog and ``elastic-chaos reap`` take down a mount whose daemon
died too.

The pipe is inherited by a child forked without exec (``multiprocessing``'s
``fork``): such a child keeps the mount alive until it exits.
"""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from elastic_chaos.storagefs import control, mounts
from elastic_chaos.storagefs.errors import DaemonError, MountError, PauseTimeout
from elastic_chaos.storagefs.oplog import OpRecord, read_ops
from elastic_chaos.storagefs.polling import poll_until
from elastic_chaos.storagefs.rules import Rule, SavePoint, from_json, to_json

_CAP_SYS_ADMIN = 1 << 21


def unavailable() -> str | None:
    """Why a storage mount cannot be made here, in one sentence; None when it can. No
    library is needed: the daemon speaks the kernel's protocol itself."""
    if not sys.platform.startswith("linux"):
        return f"FUSE mounts are made on Linux only (this is {sys.platform})"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist (load the module: modprobe fuse; in a container pass --device /dev/fuse)"
    if os.geteuid() != 0:
        return f"mounting a FUSE filesystem over a folder needs root (this process runs as uid {os.geteuid()})"
    try:
        kernel_fs = Path("/proc/filesystems").read_text().split()
    except OSError as exc:
        return f"cannot read /proc/filesystems: {exc.strerror}"
    if "fuse" not in kernel_fs:
        return "the kernel has no fuse filesystem (modprobe fuse)"
    if not _cap_sys_admin():
        return "this root has no CAP_SYS_ADMIN (an unprivileged container) and cannot mount"
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC))
    except OSError as exc:
        return f"/dev/fuse cannot be opened: {exc.strerror}"
    return None


def _cap_sys_admin() -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) & _CAP_SYS_ADMIN)
    return False


@dataclass(frozen=True)
class Paused:
    """An op held at a crash point, as the daemon reported it. ``state``: held, released,
    caller-killed (its caller died while held: the op was not done) or unmount."""

    id: int
    point: SavePoint
    path: str
    dst: str | None
    pid: int | None
    """The process (thread group) that called the op."""
    tid: int
    t: float
    rule: str
    bytes: int | None
    """For mid-write: bytes of the file written when it paused."""
    state: str
    node: str | None = None
    """The job's node of the caller (its ELASTIC_CHAOS_NODE_NAME), where it has one."""

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Paused:
        return cls(id=int(raw["id"]), point=SavePoint(raw["point"]), path=str(raw["path"]), dst=raw.get("dst"),
                   pid=raw.get("pid"), tid=int(raw["tid"]), t=float(raw["t"]), rule=str(raw["rule"]),
                   bytes=raw.get("bytes"), state=str(raw["state"]), node=raw.get("node"))


class StorageFs:
    """One storage mount over ``mountpoint``. ``mount()`` blocks until it is live;
    ``unmount()`` is idempotent; as a context manager it unmounts on every exit."""

    def __init__(self, mountpoint: Path, *, backing: Path | None = None, workdir: Path | None = None,
                 ledger: mounts.MountLedger | None = None, linger_s: float = 30.0) -> None:
        self.mountpoint = Path(os.path.realpath(mountpoint))
        self.backing = Path(os.path.realpath(backing or mountpoint))
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="elastic-chaos-storage-"))
        self.ops_path = self.workdir / "ops.jsonl"
        """The op log (JSON lines); it stays after unmount."""
        self.daemon_log = self.workdir / "daemon.log"
        self.ledger = ledger
        self.linger_s = linger_s
        self.record: mounts.MountRecord | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._sockdir: Path | None = None
        self._under: int | None = None
        self._seen_pause = 0
        self._names = 0

    @property
    def daemon_pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def direct(self) -> Path:
        """The backing folder reached without the mount, for this process only (a descriptor
        opened before the mount): read it while an op is held or hung, where a look through
        the mount would wait like any caller. The backing folder itself when it is not the
        mountpoint. DaemonError when not mounted."""
        if self._under is None:
            raise DaemonError(f"{self.mountpoint} is not mounted (call mount() first)")
        return Path(f"/proc/self/fd/{self._under}") if self.backing == self.mountpoint else self.backing

    def __enter__(self) -> StorageFs:
        return self.mount() if self._proc is None else self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.unmount()

    # -- mount ------------------------------------------------------------------------
    def mount(self, timeout_s: float = 15.0) -> StorageFs:
        """Start the daemon and wait until the mount is live (listed in /proc/self/mountinfo
        and answering). MountError saying why otherwise (nothing is left mounted)."""
        self._check()
        self._under = os.open(self.backing, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        source = mounts.SOURCE_PREFIX + secrets.token_hex(8)
        self._sockdir = Path(tempfile.mkdtemp(prefix=mounts.SOCKET_FOLDER_PREFIX))
        self.workdir.mkdir(parents=True, exist_ok=True)
        here = str(Path(__file__).resolve().parents[3])  # the folder holding elastic_chaos/: this code
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))}
        argv = [sys.executable, "-m", "elastic_chaos.storagefs", "--backing", str(self.backing), "--mountpoint",
                str(self.mountpoint), "--control", str(self._socket), "--log", str(self.ops_path),
                "--source", source, "--linger-s", str(self.linger_s)]
        try:
            with open(self.daemon_log, "ab") as logf:
                self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=logf, stderr=logf, env=env,
                                              start_new_session=True, cwd="/")
        except OSError as exc:
            self._drop_local()
            raise MountError(f"could not start the storage daemon for {self.mountpoint}: {exc}") from exc
        started = mounts.start_time(self._proc.pid)
        self.record = mounts.MountRecord(str(self.mountpoint), source, self._proc.pid, started or 0,
                                         str(self._sockdir))
        if self.ledger is not None:
            self.ledger.storage_mounted(self.record)  # before it exists: a runner killed now leaves nothing unknown
        try:
            self._wait_live(timeout_s)
        except BaseException:
            self.unmount()
            raise
        return self

    @property
    def _socket(self) -> Path:
        assert self._sockdir is not None
        return self._sockdir / "control.sock"

    def _check(self) -> None:
        if self._proc is not None:
            raise DaemonError(f"{self.mountpoint} is mounted by this StorageFs already")
        reason = unavailable()
        if reason:
            raise MountError(f"storage faults need a FUSE mount, which cannot be made here: {reason}")
        for what, folder in (("mountpoint", self.mountpoint), ("backing folder", self.backing)):
            if not folder.is_dir():
                raise MountError(f"the {what} {folder} is not a folder")
        if self.workdir.resolve().is_relative_to(self.mountpoint):
            raise MountError(f"the op log's folder {self.workdir} lies inside the mount {self.mountpoint}; "
                             "give a workdir outside it")
        other = [m for m in mounts.mounts() if m.mountpoint == str(self.mountpoint) and m.fstype == mounts.FSTYPE]
        if other:
            raise MountError(f"{self.mountpoint} already has a storage mount ({other[-1].source}); unmount it "
                             "first (a dead run's: `elastic-chaos reap`)")

    def _wait_live(self, timeout_s: float) -> None:
        assert self._proc is not None and self.record is not None
        proc, record = self._proc, self.record

        def live() -> bool:
            if proc.poll() is not None:
                raise MountError(f"the storage daemon exited ({proc.returncode}) before {self.mountpoint} "
                                 f"was mounted: {self._log_tail()}")
            return bool(mounts.find(record.mountpoint, record.source) and self._socket.exists()
                        and self._call("status").get("initialized"))

        if poll_until(live, timeout_s=timeout_s, interval_s=0.02):
            return
        raise MountError(f"{self.mountpoint} was not mounted within {timeout_s:g}s; daemon log: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return " | ".join(self.daemon_log.read_text(errors="replace").strip().splitlines()[-5:]) or "(empty)"
        except OSError:
            return "(no log)"

    # -- rules and pauses -------------------------------------------------------------
    def _call(self, cmd: str, **args: Any) -> dict[str, Any]:
        if self._proc is None or self._sockdir is None:
            raise DaemonError(f"{self.mountpoint} is not mounted (call mount() first)")
        return control.call(self._socket, {"cmd": cmd, **args}, timeout_s=control.MAX_WAIT_S + 10)

    def set_rule(self, rule: Rule, name: str | None = None, *, node: str | None = None) -> str:
        """Activate ``rule`` (replacing one of the same ``name``); returns its name. Takes
        effect for every op that starts from now on; with ``node``, only for the callers of
        that node of the job (processes whose ELASTIC_CHAOS_NODE_NAME it is)."""
        if name is None:
            self._names += 1
            name = f"{to_json(rule)['kind']}-{self._names}"
        self._call("set", name=name, rule=to_json(rule), node=node)
        return name

    def clear_rule(self, name: str | None = None) -> list[str]:
        """Clear rule ``name`` (every rule when None): the ops it held or slowed go on at once,
        an op its crash point holds included. Returns the names of active rules cleared (a
        crash point that fired is spent already); idempotent."""
        cleared: list[str] = self._call("clear", name=name)["cleared"]
        return cleared

    def rules(self) -> dict[str, Rule]:
        """The active rules (a one-shot rule that fired, an expired hang are gone)."""
        return {n: from_json(r) for n, r in self._call("rules")["rules"].items()}

    def pauses(self) -> list[Paused]:
        return [Paused.from_json(p) for p in self._call("pauses")["pauses"]]

    def wait_pause(self, timeout_s: float) -> Paused:
        """Block until a crash point pauses an op (the next one this object has not returned
        yet) and return it; PauseTimeout after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            found = self._call("wait_pause", after=self._seen_pause, timeout_s=max(0.0, min(left, 10.0)))["pause"]
            if found is not None:
                paused = Paused.from_json(found)
                self._seen_pause = paused.id
                return paused
            if left <= 0:
                raise PauseTimeout(f"no op reached a crash point of {self.mountpoint} within {timeout_s:g}s")

    def release(self, pause_id: int | None = None) -> list[Paused]:
        """Let held op ``pause_id`` (every held op when None) go on: done if its caller lives;
        returns the pauses released ([] when it was over: idempotent)."""
        return [Paused.from_json(p) for p in self._call("release", pause=pause_id)["released"]]

    def ops(self) -> list[OpRecord]:
        """The op log so far (complete lines); readable after unmount too."""
        return read_ops(self.ops_path)

    # -- unmount ----------------------------------------------------------------------
    def unmount(self, timeout_s: float | None = None) -> None:
        """Clear the rules (held ops go on), unmount and stop the daemon; blocks until both
        are gone (``timeout_s``, default the daemon's linger + 10 s, then SIGKILL and a lazy
        unmount). Idempotent. DaemonError when the mount could not be removed (the
        ledger keeps it for the watchdog or ``elastic-chaos reap``)."""
        proc, self._proc = self._proc, None
        if proc is None:
            self._drop_local()
            return
        if proc.stdin is not None:
            try:
                proc.stdin.close()  # the lifeline: end-of-file stops the daemon
            except OSError:
                pass
        try:
            proc.wait(self.linger_s + 10 if timeout_s is None else timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        assert self.record is not None
        try:
            mounts.take_down(self.record.mountpoint, self.record.source)
        except OSError as exc:
            raise DaemonError(f"could not unmount {self.mountpoint}: {exc}; `elastic-chaos reap` or "
                                f"`umount -l {self.mountpoint}` removes it") from exc
        if self.ledger is not None:
            self.ledger.storage_unmounted(self.record)
        self._drop_local()

    def _drop_local(self) -> None:
        if self._sockdir is not None:
            shutil.rmtree(self._sockdir, ignore_errors=True)
            self._sockdir = None
        if self._under is not None:
            os.close(self._under)
            self._under = None
