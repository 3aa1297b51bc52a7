"""The storage layer's op log as timeline events: each save as the volume saw it, long stalls,
and the whole log summed up as the run ends.

The checkpoint volume's storage layer (elastic_chaos.platforms.storage) logs every interesting
operation of the job's processes with its time, its node, the time a fault held it and
its error (elastic_chaos.storagefs.oplog). This watcher re-reads the log (a handful of
lines per save) and adds ``checkpoint/storage_layer`` as it starts, then, once each:

- ``checkpoint/storage_save`` per file written (create to the rename that published it,
  or to its first error) and per create refused (EROFS): how long the save took on this
  volume, how long faults held it, its errno when it failed; stamped at its end, on its
  writer's node;
- ``checkpoint/storage_stall`` per operation outside a save held a tenth of a second or
  more (a hung listing, the folder's fsync, a slowed open);
- ``checkpoint/storage_summary`` once, after the last poll: every operation's time held
  (the time stalled on storage) and the failed ones by errno.

A save still open is left for a later poll; the last poll runs after the nodes stopped.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from elastic_chaos.events import CheckpointEv, Timeline
from elastic_chaos.events.checkpoint_events import StorageLayer, StorageSave, StorageStall, StorageSummary
from elastic_chaos.storagefs.oplog import OpRecord, Save, read_ops, saves
from elastic_chaos.watchers.api import Watcher

STALL_S = 0.1
"""An operation outside a save held this long is worth an event of its own (a latency rule holds each
of a save's listings and opens; a few per save)."""
_BOOKKEEPING = frozenset({"pause", "resume", "rule-set", "rule-cleared", "rule-expired", "rule-spent", "mount",
                          "unmount"})


class StorageOpWatcher(Watcher):
    """Turns the op log at ``ops_path`` into ``checkpoint/storage_*`` events."""

    interval_s = 0.5

    def __init__(self, timeline: Timeline, ops_path: Path, *, mountpoint: Path | None = None) -> None:
        super().__init__(timeline)
        self.ops_path = ops_path
        self.mountpoint = mountpoint
        self._saves: set[tuple[str, float]] = set()
        self._stalls: set[tuple[str, float, int | None]] = set()
        self._records: list[OpRecord] = []

    def start(self) -> None:
        self.timeline.emit(CheckpointEv.STORAGE_LAYER, None, StorageLayer(
            mountpoint=str(self.mountpoint) if self.mountpoint else None, op_log=str(self.ops_path)))
        super().start()

    def poll(self) -> None:
        self._records = read_ops(self.ops_path)
        found = saves(self._records)
        for s in found:
            if (s.path, s.start) not in self._saves:
                self._saves.add((s.path, s.start))
                self._emit_save(s)
        for r in self._records:   # a save refused at its create (EROFS) never opened a file
            if r.op in ("create", "open") and r.error and (r.path or "", r.t) not in self._saves:
                self._saves.add((r.path or "", r.t))
                self.timeline.emit(CheckpointEv.STORAGE_SAVE, r.node, StorageSave(
                    path=r.path, pid=r.pid, started_at=round(r.t, 6), duration_s=round(r.dur, 4), bytes=0,
                    stalled_s=round(r.stalled_s or 0.0, 4), error=r.error), t=r.end)
        writes = {r.fh for r in self._records if r.op in ("create", "open") and r.fh is not None}
        written = {r.path for r in self._records if r.op in ("create", "open") and r.fh is not None}
        for r in self._records:   # a save's own ops (its handle's, its rename) are the save's, done or not
            key = (r.op, r.t, r.tid)
            if (r.op in _BOOKKEEPING or (r.stalled_s or 0.0) < STALL_S or key in self._stalls
                    or r.fh in writes or (r.op == "rename" and r.path in written)):
                continue
            self._stalls.add(key)
            self.timeline.emit(CheckpointEv.STORAGE_STALL, r.node, StorageStall(
                op=r.op, path=r.path, pid=r.pid, stalled_s=round(r.stalled_s or 0.0, 3), error=r.error), t=r.t)

    def _emit_save(self, s: Save) -> None:
        self.timeline.emit(CheckpointEv.STORAGE_SAVE, s.node, StorageSave(
            path=s.path, final=s.final, pid=s.pid, started_at=round(s.start, 6), duration_s=round(s.duration_s, 4),
            bytes=s.bytes, stalled_s=round(s.stalled_s, 4), error=s.error), t=s.end)

    def finish(self) -> None:
        """The whole log summed up, once, after the last poll."""
        records = [r for r in self._records if r.op not in _BOOKKEEPING]
        failed = Counter(r.error for r in records if r.error)
        self.timeline.emit(CheckpointEv.STORAGE_SUMMARY, None, StorageSummary(
            ops=len(records), stalled_s=round(sum(r.stalled_s or 0.0 for r in records), 3), saves=len(self._saves),
            failed=dict(failed), mountpoint=str(self.mountpoint) if self.mountpoint else None))
