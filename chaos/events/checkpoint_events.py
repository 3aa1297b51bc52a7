"""Checkpoints: trainer.progress ``checkpoint_*`` lines, a script's --resume-regex, the
checkpoint file watcher (watchers/checkpoints.py, ``via: file``)."""
from __future__ import annotations

from dataclasses import dataclass

from chaos.events.progress_events import Worker
from chaos.events.types import Source, event_type


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
    was written (a file does not say which step it holds)."""
    inode: int | None = None
    size: int | None = None


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


class CheckpointEv:
    """Checkpoints: trainer.progress ``checkpoint_*`` lines, a script's --resume-regex,
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
