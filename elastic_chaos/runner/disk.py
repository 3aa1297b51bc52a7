"""Room on the disks a run keeps its evidence on: checked while it runs, and kept for its report.

A full disk under the report folder once ended a run with Python tracebacks, a timeline cut at
4,096 bytes, an empty report.json.tmp and teardown itself crashing; with etcd on that disk it
ended as a "usage error" whose cause hid inside etcd.log. Now:

- a run reserves :data:`RESERVE_BYTES` in its folder when it starts (refused at once, exit 2, when
  the disk has not even that), and frees them only to write its report;
- :class:`DiskWatch` looks at every disk the run writes to (the report folder, the job's workdir,
  etcd's data) twice a second, and at the timeline's own writes: below :data:`LOW_BYTES` free, or
  once a write failed for want of space, the run stops with :class:`~elastic_chaos.errors.DiskFull` (exit 4:
  the run says nothing about the job), saying where and how much was left;
- teardown stops everything as usual, frees the reserve, writes the events the timeline held in
  memory, records ``runner/disk_full``, then report.json and the renderings.
"""
from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from elastic_chaos.analysis.verdict import DISK_CHECK
from elastic_chaos.errors import DiskFull, SpecError
from elastic_chaos.events import RunnerEv, Timeline
from elastic_chaos.events.runner_events import DiskFull as DiskFullEvent
from elastic_chaos.watchers.api import Watcher

RESERVE_BYTES = 8 * 1024 * 1024
"""Kept free for the run's own report (report.json, report.html, summary.md, the timeline's tail)."""
LOW_BYTES = 4 * 1024 * 1024
"""Below this much free space on a disk the run writes to, the run stops while it still can."""
RESERVE = ".elastic-chaos.reserve"
"""The reserve's file in the report folder."""
_FULL = {errno.ENOSPC, errno.EDQUOT}


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use at ``path`` (its nearest existing folder); None when
    it cannot be told."""
    for p in (path, *path.parents):
        try:
            st = os.statvfs(p)
        except FileNotFoundError:
            continue
        except OSError:
            return None
        return st.f_bavail * st.f_frsize
    return None


def reserve(folder: Path, size: int = RESERVE_BYTES) -> Path:
    """Set ``size`` bytes aside in ``folder`` for the run's report; SpecError (exit 2, before anything
    starts) when its disk has not that much room."""
    path = folder / RESERVE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)
    except OSError as exc:
        path.unlink(missing_ok=True)
        if exc.errno in _FULL:
            raise SpecError(f"report folder {folder} is on a disk with {free_bytes(folder) or 0:,} bytes free; a run "
                            f"keeps its evidence there (node logs, timeline, etcd's data) and needs at least "
                            f"{size + LOW_BYTES:,}: free some space or pick another folder (--report-dir)") from None
        raise SpecError(f"report folder {folder}: could not set {size:,} bytes aside for the report "
                        f"({exc.strerror}); pick a folder you can write (--report-dir)") from None
    return path


def unreserve(folder: Path) -> None:
    """Give the reserve back (idempotent): the report is about to be written."""
    (folder / RESERVE).unlink(missing_ok=True)


class DiskWatch(Watcher):
    """Stops the run (``check`` raises DiskFull) when a disk it writes to runs low, or the timeline
    could not be written for want of space."""

    interval_s = 0.5

    def __init__(self, timeline: Timeline, paths: Callable[[], Iterable[Path]]) -> None:
        super().__init__(timeline)
        self._paths = paths

    def poll(self) -> None:
        failed = self.timeline.write_error
        if failed is not None and failed.errno in _FULL and self.timeline.path is not None:
            raise DiskFull(self.timeline.path, free_bytes(self.timeline.path), "the timeline could not be written")
        for path in self._paths():
            free = free_bytes(path)
            if free is not None and free < LOW_BYTES:
                raise DiskFull(path, free)

    def check(self) -> None:
        """A full disk is said as what it is, not as a watcher that died."""
        if isinstance(self._error, DiskFull):
            raise self._error
        super().check()

    def _say_died(self, exc: BaseException) -> None:
        if not isinstance(exc, DiskFull):   # a full disk is recorded once there is room (ChaosRun's teardown)
            super()._say_died(exc)

    @property
    def full(self) -> DiskFull | None:
        """What stopped the run, when a full disk did."""
        return self._error if isinstance(self._error, DiskFull) else None


def room_for_the_report(report_dir: Path, timeline: Timeline, watch: DiskWatch | None, *,
                        said_already: bool) -> list[tuple[str, str]]:
    """Free the reserve for the report, write what the timeline held in memory, and record a full disk
    that stopped the run; returns it as a problem of the verdict (unless ``said_already``)."""
    unreserve(report_dir)
    left = timeline.flush_unwritten()
    full = watch.full if watch is not None else None
    if full is None and timeline.write_error is not None:
        full = DiskFull(timeline.path, free_bytes(report_dir), "the timeline could not be written")
    if full is None:
        return []
    timeline.emit(RunnerEv.DISK_FULL, None, DiskFullEvent(path=full.path, free_bytes=full.free_bytes,
                                                          why=full.why or None, at=full.at))
    said = str(full) + (f"; {left} event(s) of the timeline could not be written" if left else "")
    return [] if said_already else [(said, DISK_CHECK)]
