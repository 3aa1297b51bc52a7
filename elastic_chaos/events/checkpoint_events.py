"""Checkpoints: elastic_chaos.trainer.progress ``checkpoint_*`` lines, a script's --resume-regex, the
checkpoint file watcher (watchers/checkpoints.py, ``via: file``; with inotify, more than one
writer of a path at once), and the storage layer's op log (watchers/storage.py: saves as the
volume saw them, stalls, a writer held at a crash point)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from elastic_chaos.events.payload import Payload
from elastic_chaos.events.progress_events import Worker
from elastic_chaos.events.types import Source, event_type


@dataclass(frozen=True, kw_only=True)
class Save(Worker):
    """A checkpoint of ``step`` started or is durable at ``path``."""

    step: int | None = None
    path: str | None = None
    reason: str | None = None
    """periodic, sigterm, observed (the file watcher), ..."""
    via: str | None = None
    """``file``: seen by the checkpoint file watcher, not reported by the script."""
    step_from: str | None = None
    """``progress``: the file watcher's ``step`` is the latest progress step seen when the file
    was written (a file does not say which step it holds); ``folder``: the step the save's folder
    name carries (``step-00000040``: a DCP folder, or a folder a ``--checkpoint`` glob matched)."""
    inode: int | None = None
    """The file's (a save of one file; None for several)."""
    size: int | None = None
    """Bytes: the file's, or the sum of a save's files."""
    files: int | None = None
    """How many files the file watcher saw complete as this one save (``path``: the file, or the
    folder they share); None where the save was reported, not seen."""


@dataclass(frozen=True, kw_only=True)
class ConcurrentWrites(Payload):
    """One checkpoint path written by more than one writer at once (watchers/inotify.py): each
    writer had it (or the temporary file it renamed onto it) open before another's write of it
    completed. A shared workdir whose every node saves the same path does this; the writes race
    (a torn file, a restart that cannot load it), which a folder of each node's own avoids
    (``--node-local-workdir``)."""

    path: str | None = None
    writes: int | None = None
    """The most writes of the path that overlapped in one burst (the writers seen at once)."""
    bursts: int | None = None
    """Bursts of overlapping writes seen so far (saves that raced)."""
    first_at: float | None = None
    """When the first such burst was seen."""
    last_at: float | None = None
    """When the latest was."""


@dataclass(frozen=True, kw_only=True)
class Loaded(Worker):
    """Training resumed from ``step`` (0 and no path: a fresh start)."""

    step: int | None = None
    path: str | None = None
    reason: str | None = None
    """Who restored it, where a script says (``lightning``: Lightning's own restore)."""
    via: str | None = None
    line: str | None = None


@dataclass(frozen=True, kw_only=True)
class FileEvent(Worker):
    path: str | None = None
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class StorageSave(Payload):
    """One file written through the storage layer: from its create to the rename that published
    it (or its close, when it was never renamed, or its first error). Stamped at its end."""

    path: str | None = None
    """Inside the volume: the temporary file it was written as."""
    final: str | None = None
    """Where the rename put it (None: never renamed)."""
    pid: int | None = None
    started_at: float | None = None
    duration_s: float | None = None
    bytes: int | None = None
    stalled_s: float | None = None
    """Time the storage faults held its operations."""
    error: str | None = None
    """The errno name of its first failed operation (ENOSPC, EIO, EROFS, EINTR: its writer died)."""


@dataclass(frozen=True, kw_only=True)
class StorageStall(Payload):
    """One operation outside a save that a storage fault held for a while (a hung listing)."""

    op: str | None = None
    path: str | None = None
    pid: int | None = None
    stalled_s: float | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class StorageLayer(Payload):
    """The job's checkpoint folder is behind the storage layer for this run."""

    mountpoint: str | None = None
    op_log: str | None = None


@dataclass(frozen=True, kw_only=True)
class StorageSummary(Payload):
    """The storage layer's op log of the whole run, summed up as the run ends."""

    ops: int | None = None
    """Operations logged."""
    stalled_s: float | None = None
    """Time every operation spent held by a storage fault, saves or not."""
    saves: int | None = None
    failed: Mapping[str, int] = field(default_factory=dict)
    """Operations failed, by errno name."""
    mountpoint: str | None = None


@dataclass(frozen=True, kw_only=True)
class StoragePaused(Payload):
    """A writer held at a crash point of its save (``point``), before it was killed or released."""

    point: str | None = None
    path: str | None = None
    pid: int | None = None
    bytes: int | None = None
    """mid-write: bytes of the file written when it was held."""


class CheckpointEv:
    """Checkpoints: elastic_chaos.trainer.progress ``checkpoint_*`` lines, a script's --resume-regex,
    the checkpoint file watcher (watchers/checkpoints.py, ``via: file``)."""

    STARTED = event_type(Source.CHECKPOINT, "started", Save)
    """A checkpoint of ``step`` is being written (``reason``: periodic, sigterm, ...)."""
    SAVED = event_type(Source.CHECKPOINT, "saved", Save)
    """A checkpoint of ``step`` is durable at ``path``."""
    LOADED = event_type(Source.CHECKPOINT, "loaded", Loaded)
    """Training resumed from ``step`` (0 and no path: a fresh start)."""
    CORRUPT = event_type(Source.CHECKPOINT, "corrupt", FileEvent)
    """A checkpoint file could not be loaded and was skipped (``path``, ``reason``)."""
    REMOVED = event_type(Source.CHECKPOINT, "removed", FileEvent)
    """The trainer removed a checkpoint file (stale or corrupt; ``path``, ``reason``)."""
    STORAGE_LAYER = event_type(Source.CHECKPOINT, "storage_layer", StorageLayer)
    """The checkpoint folder is behind the storage layer (its op log is watched from now on)."""
    STORAGE_SAVE = event_type(Source.CHECKPOINT, "storage_save", StorageSave)
    """A file written through the storage layer (create to rename), timed by the volume itself."""
    STORAGE_STALL = event_type(Source.CHECKPOINT, "storage_stall", StorageStall)
    """An operation outside a save held by a storage fault for a tenth of a second or more."""
    STORAGE_SUMMARY = event_type(Source.CHECKPOINT, "storage_summary", StorageSummary)
    """The storage layer's op log summed up (time stalled, failed operations) as the run ends."""
    STORAGE_PAUSED = event_type(Source.CHECKPOINT, "storage_paused", StoragePaused)
    """A writer was held at a crash point of its save (the node is the writer's)."""
    CONCURRENT_WRITES = event_type(Source.CHECKPOINT, "concurrent_writes", ConcurrentWrites)
    """A watched checkpoint path was written by more than one writer at once (``path``, ``writes``,
    ``bursts``): said when first seen, again when more writers are seen at once, and as the run ends
    when more bursts were seen since (the node: the node-local folder's; None: a shared path)."""
