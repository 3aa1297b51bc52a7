"""Mounts as the kernel lists them, and taking down one a record names.

A storage mount is known by two things together: its mountpoint and its source,
``elastic-chaos-storagefs:<token>`` with a token drawn for that mount alone
(``/proc/self/mountinfo`` shows both). Everything here that unmounts checks
both, so a look-alike (another run's mount, a mount over the same folder made by
something else) is never touched.

:func:`cleanup` is what a watchdog or ``elastic-chaos reap`` does with a mount a
dead run recorded: stop its daemon (verified by PID and start time, SIGTERM so it
unmounts itself, SIGKILL if it does not), then detach whatever is left of the
mount, including a dead one whose daemon was SIGKILLed ("Transport endpoint is
not connected").
"""
from __future__ import annotations

import ctypes
import errno
import os
import re
import signal
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from elastic_chaos.storagefs.polling import poll_until

FSTYPE = "fuse.elastic-chaos"
SOCKET_FOLDER_PREFIX = "ec-storagefs-"
"""The controller's private temporary folder for the control socket (a socket's path is short)."""
_SOCKET_FILES = ("control.sock", "control.sock.new")
SOURCE_PREFIX = "elastic-chaos-storagefs:"
_SOURCE = re.compile(re.escape(SOURCE_PREFIX) + r"[0-9a-f]{8,64}")
MS_NOSUID, MS_NODEV = 2, 4
MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class MountInfo:
    mount_id: int
    device: str
    """``major:minor`` of the mount (its FUSE connection number is the minor)."""
    mountpoint: str
    fstype: str
    source: str


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts() -> list[MountInfo]:
    """Every mount of this process's mount namespace, in mount order."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        head, tail = left.split(), right.split()
        if len(head) < 5 or len(tail) < 2:
            continue
        found.append(MountInfo(int(head[0]), head[2], _unescape(head[4]), tail[0], _unescape(tail[1])))
    return found


def find(mountpoint: str, source: str) -> MountInfo | None:
    """The mount at ``mountpoint`` whose source is ``source`` (the topmost), or None."""
    hits = [m for m in mounts() if m.mountpoint == mountpoint and m.source == source]
    return hits[-1] if hits else None


def mount_fuse(fd: int, source: str, mountpoint: str) -> None:
    """mount(2) a FUSE filesystem served on ``fd`` at ``mountpoint`` (root only). Raises OSError."""
    st = os.stat(mountpoint)
    options = (f"fd={fd},rootmode={st.st_mode & 0o170000:o},user_id={os.getuid()},group_id={os.getgid()},"
               "allow_other,default_permissions")
    if _libc.mount(source.encode(), mountpoint.encode(), FSTYPE.encode(), MS_NOSUID | MS_NODEV,
                   options.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {mountpoint}: {os.strerror(err)}")


def umount(mountpoint: str, *, lazy: bool = False) -> None:
    """umount2(2); ``lazy`` detaches at once and lets open files finish. Raises OSError."""
    if _libc.umount2(mountpoint.encode(), MNT_DETACH if lazy else 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount {mountpoint}: {os.strerror(err)}")


def take_down(mountpoint: str, source: str) -> bool:
    """Unmount the mount at ``mountpoint`` with ``source`` (plain, then lazily when busy or
    dead), and any more of that source stacked there. Returns whether one was there. OSError
    when it could not be removed, or when another mount covers it (that one is not touched)."""
    found = False
    for _ in range(8):  # stacked mounts of the same source: rare, bounded
        here = [m for m in mounts() if m.mountpoint == mountpoint]
        if not any(m.source == source for m in here):
            return found
        found = True
        if here[-1].source != source:
            raise OSError(errno.EBUSY, f"{mountpoint} is covered by another mount ({here[-1].source}); "
                                       "not touched")
        try:
            umount(mountpoint)
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.ENOTCONN, errno.EINVAL):
                raise
            try:
                umount(mountpoint, lazy=True)
            except OSError:
                if find(mountpoint, source) is not None:
                    raise  # else its daemon unmounted it meanwhile
    if find(mountpoint, source) is not None:
        raise OSError(errno.EBUSY, f"{mountpoint} is still mounted after 8 unmounts")
    return found


@dataclass(frozen=True)
class MountRecord:
    """What a run records about one storage mount so that a reaper can take it down."""

    mountpoint: str
    source: str
    daemon_pid: int
    daemon_start: int
    """The daemon's start time in clock ticks since boot (/proc/PID/stat field 22)."""
    sockets: str = ""
    """The private folder of its control socket (removed with the mount)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Any) -> MountRecord:
        """Raises ValueError for anything but a record this module wrote."""
        if not isinstance(raw, dict):
            raise ValueError(f"mount record {raw!r}")
        record = cls(mountpoint=str(raw.get("mountpoint")), source=str(raw.get("source")),
                     daemon_pid=int(raw.get("daemon_pid", 0)), daemon_start=int(raw.get("daemon_start", 0)),
                     sockets=str(raw.get("sockets") or ""))
        if not _SOURCE.fullmatch(record.source) or not record.mountpoint.startswith("/"):
            raise ValueError(f"not a storage mount record: {raw!r}")
        return record


class MountLedger(Protocol):
    """Where a run records its mounts (the local platform's RunGuard)."""

    def storage_mounted(self, record: MountRecord) -> None: ...

    def storage_unmounted(self, record: MountRecord) -> None: ...


def start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot; None when it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _stop_daemon(record: MountRecord, timeout_s: float) -> str | None:
    """SIGTERM the recorded daemon (it unmounts and exits), SIGKILL when it does not; what
    was done, or None when it was gone already."""
    pid = record.daemon_pid
    if start_time(pid) != record.daemon_start:
        return None
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return f"stopped its daemon (PID {pid})"
        if poll_until(lambda: start_time(pid) != record.daemon_start, timeout_s=wait_s, interval_s=0.05):
            return f"stopped its daemon (PID {pid}{', SIGKILL' if sig == signal.SIGKILL else ''})"
    raise OSError(errno.EBUSY, f"its daemon (PID {pid}) survived SIGKILL")


def cleanup(record: MountRecord, timeout_s: float = 10.0) -> list[str]:
    """Take down the mount ``record`` names and stop its daemon; returns what was done ([]
    when both were gone). Touches only the recorded daemon (PID and start time) and mounts
    with the recorded mountpoint and source. Raises OSError saying what is left."""
    done = []
    stopped = _stop_daemon(record, timeout_s)
    if stopped:
        done.append(stopped)
    if take_down(record.mountpoint, record.source):
        done.append(f"unmounted {record.mountpoint}")
    remove_socket_folder(record.sockets)
    return done


def remove_socket_folder(folder: str) -> None:
    """Remove a control socket's private folder: only one of ours (by name), only its socket
    files, and only when nothing else is in it. Idempotent."""
    path = Path(folder)
    if not folder or not path.name.startswith(SOCKET_FOLDER_PREFIX) or not path.is_dir():
        return
    for name in _SOCKET_FILES:
        (path / name).unlink(missing_ok=True)
    try:
        path.rmdir()
    except OSError:
        pass
