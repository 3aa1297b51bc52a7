"""Atomic checkpoints on a shared directory, and resume from the newest complete one.

A checkpoint is written to a temporary file, fsynced, then renamed into place
(and the directory fsynced), so a reader sees either the whole file or none of
it: a node killed mid-save leaves at most a stray temporary file, which resume
ignores. A file that exists but does not load (disk corruption, a truncated
copy) is reported and skipped in favour of the next older one.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer import progress

FORMAT_VERSION = 1
_NAME = re.compile(r"^ckpt-(\d{8})\.pt$")


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"ckpt-{step:08d}.pt"


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(directory: Path, step: int, state: dict[str, Any], *, keep: int = 3,
         before_rename: Callable[[], None] | None = None, reason: str = "periodic") -> Path:
    """Write ``state`` as the checkpoint of ``step``; blocks until durable.

    Safe to call from several ranks at once for the same step: each writes its
    own temporary file and the renames replace one complete file by another.
    ``before_rename`` runs between the durable temporary file and the rename
    (the trainer's ``--save-delay`` pauses there to stand in for a large
    write). ``reason`` says why (periodic, sigterm, spot-rebalance, ...).
    """
    directory.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(directory, step)
    tmp = directory / f".{final.name}.tmp.{os.getpid()}"
    progress.report_checkpoint_started(step, str(final), reason=reason)
    payload = {"format_version": FORMAT_VERSION, "step": step, **state}
    with open(tmp, "wb") as f:
        torch.save(payload, f)
        f.flush()
        os.fsync(f.fileno())
    if before_rename is not None:
        before_rename()
    os.replace(tmp, final)
    _fsync_dir(directory)
    progress.report_checkpoint_saved(step, str(final), reason=reason)
    _prune(directory, keep)
    return final


def _prune(directory: Path, keep: int) -> None:
    for old in list_checkpoints(directory)[keep:]:
        try:
            old.unlink()
        except FileNotFoundError:
            pass  # another rank pruned it first


def list_checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoint files, newest first (temporary files never match)."""
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir() if _NAME.match(p.name)]
    return sorted(found, key=lambda p: p.name, reverse=True)


@dataclass(frozen=True)
class Loaded:
    step: int
    path: Path
    state: dict[str, Any]


def load_newest(directory: Path) -> Loaded | None:
    """The newest checkpoint that loads and is well formed, or None for a fresh start.

    Every file skipped on the way is reported as ``checkpoint_corrupt``.
    """
    for path in list_checkpoints(directory):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
                raise ValueError("not an elastic-chaos trainer checkpoint")
            step = int(state["step"])
        except FileNotFoundError:
            continue  # pruned by another rank between listing and loading
        except Exception as exc:  # noqa: BLE001 - any unreadable file is skipped, loudly
            progress.report_checkpoint_corrupt(str(path), f"{type(exc).__name__}: {exc}")
            continue
        return Loaded(step=step, path=path, state=state)
    return None
