"""Storage faults in the kernel path: a FUSE passthrough over a job's checkpoint folder.

Chaos Mesh's IOChaos makes a volume slow, full, failing or read-only through a
FUSE layer; this package does the same for a local folder, so every process of a
node (torch's own writer included) meets the fault where a real one would hit:
in ``open``, ``write``, ``fsync``, ``rename``. On top, it can stop a writer at an
exact point of its save protocol (after the create, mid-write, before the
fsync, before or after the rename) and tell who was stopped, and it keeps an op
log precise enough to time every save.

The daemon speaks the kernel's FUSE protocol on ``/dev/fuse`` itself (no
libfuse, no compiled binding): it needs root and ``/dev/fuse``, nothing else;
docs/STORAGE.md says why this and not mfusepy or pyfuse3.

- :class:`StorageFs` (controller.py): mount, rules, pauses, op log, unmount;
  :func:`unavailable` says why it cannot be used here.
- rules.py: the rule model (:class:`Latency`, :class:`Throttle`, :class:`Hang`,
  :class:`NoSpace`, :class:`Errors`, :class:`ReadOnly`, :class:`CrashPoint`, :class:`StaleRead`).
- stale.py: what a stale cache shows (:class:`~elastic_chaos.storagefs.stale.StaleView`).
- oplog.py: the op log, and save timings from it.
- mounts.py: mountinfo, unmounting, :func:`~mounts.cleanup` for reapers.
- daemon.py, server.py, engine.py, callers.py, fs.py, proto.py, control.py: the daemon.
"""
from __future__ import annotations

from elastic_chaos.storagefs.controller import Paused, StorageFs, unavailable
from elastic_chaos.storagefs.mounts import MountLedger, MountRecord, cleanup
from elastic_chaos.storagefs.oplog import OpRecord, Save, SaveStats, save_stats, saves
from elastic_chaos.storagefs.rules import (
    ALL,
    DATA,
    MUTATING,
    CrashPoint,
    Errors,
    Hang,
    Kind,
    Latency,
    NoSpace,
    ReadOnly,
    Rule,
    SavePoint,
    StaleRead,
    Throttle,
)

__all__ = ["ALL", "DATA", "MUTATING", "CrashPoint", "Errors", "Hang", "Kind", "Latency", "MountLedger", "MountRecord",
           "NoSpace", "OpRecord", "Paused", "ReadOnly", "Rule", "Save", "SaveStats", "SavePoint", "StaleRead",
           "StorageFs", "Throttle", "cleanup", "save_stats", "saves", "unavailable"]
