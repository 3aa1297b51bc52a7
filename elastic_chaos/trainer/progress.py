"""Report training progress as one JSON line per event on stdout.

This module is the whole contract between a training script and elastic-chaos.
A line looks like::

    ELASTIC_CHAOS {"ev": "step", "t": 1795328918.14, "step": 39, "rank": 0, ...}

The toolkit finds these lines in mixed node logs by their prefix, so a script
may print anything else it likes. Every event carries the wall-clock time at
which it happened *at the source*, so the toolkit's measurements can be checked
against ground truth. Rank, world size and restart count are read from the
environment torchrun sets; a script need not pass them.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, TextIO

PREFIX = "ELASTIC_CHAOS "
"""Marks a progress line in a node's log; parsers split on it."""

_stream: TextIO | None = None


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _identity() -> dict[str, Any]:
    return {
        "rank": _env_int("RANK", 0),
        "local_rank": _env_int("LOCAL_RANK", 0),
        "world_size": _env_int("WORLD_SIZE", 1),
        "restart_count": _env_int("TORCHELASTIC_RESTART_COUNT", 0),
        "pid": os.getpid(),
    }


def emit(ev: str, **fields: Any) -> None:
    """Write one event line (flushed at once: a killed process loses nothing it reported)."""
    record: dict[str, Any] = {"ev": ev, "t": time.time(), **_identity(), **fields}
    stream = _stream or sys.stdout
    stream.write(PREFIX + json.dumps(record, separators=(",", ":")) + "\n")
    stream.flush()


def report_start(**fields: Any) -> None:
    """The worker process is up (before process-group init): marks the restart phase."""
    emit("start", **fields)


def report_step(step: int, *, epoch: int | None = None,
                samples: list[list[int]] | None = None, **fields: Any) -> None:
    """Step ``step`` completed. ``samples`` lists [start, stop) ranges of the global
    sample order this rank consumed in the step, for exactly-once accounting."""
    extra: dict[str, Any] = dict(fields)
    if epoch is not None:
        extra["epoch"] = epoch
    if samples is not None:
        extra["samples"] = samples
    emit("step", step=step, **extra)


def report_checkpoint_started(step: int, path: str, **fields: Any) -> None:
    """A checkpoint of ``step`` is being written (phase-targeted faults key on this)."""
    emit("checkpoint_started", step=step, path=path, **fields)


def report_checkpoint_saved(step: int, path: str, **fields: Any) -> None:
    """A checkpoint of ``step`` is complete and durable at ``path``."""
    emit("checkpoint_saved", step=step, path=path, **fields)


def report_checkpoint_loaded(step: int, path: str | None, **fields: Any) -> None:
    """Training resumed from ``step`` (0 and ``path=None`` for a fresh start)."""
    emit("checkpoint_loaded", step=step, path=path, **fields)


def report_checkpoint_corrupt(path: str, reason: str) -> None:
    """A checkpoint file could not be loaded and was skipped."""
    emit("checkpoint_corrupt", path=path, reason=reason)
