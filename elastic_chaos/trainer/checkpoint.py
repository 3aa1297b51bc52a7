"""Atomic checkpoints on a shared directory, and resume from the newest complete one.

A checkpoint is written to a temporary file, fsynced, then renamed into place
(and the directory fsynced), so a reader sees either the whole file or none of
it. A file that exists but does not load (disk corruption, a truncated copy)
is reported and skipped in favour of the next older one.

Saving also tidies the directory, because a checkpoint directory outlives the
processes that write it (restarts, rollbacks, earlier runs):

* The step just saved is the head of the job's history. A job only moves
  forward from the step it resumed from, so the files above that step which
  its restore skipped (they did not load) belong to a history that was rolled
  back: they are stale, and are removed once the new head is durable. A
  higher file that appeared *after* the restore was written by another live
  writer (two worlds after a split brain, both in this directory): it is
  someone's newest state, and is left alone. A process that did not restore
  from the directory treats every higher file as stale. Below the head, the
  ``keep`` newest *well-formed* files are kept; a corrupt file never counts.
* A save killed before its rename leaves its temporary file, a full
  checkpoint's worth of disk. Temporaries are named after their writer
  (host, PID namespace, PID), and one whose writer is gone is removed, by a
  save and by a restart's :func:`load_newest`. A writer on another host (the
  directory may be on EFS/FSx) cannot be asked whether it lives, so its
  temporary is removed only when untouched for ``ABANDONED_AFTER_S``.

Every removal other than routine pruning is reported as a
``checkpoint_removed`` progress event (corrupt files also as
``checkpoint_corrupt``).

With checksums on (:func:`use_checksums`, the trainer's ``--checkpoint-checksum``)
a save carries the sha256 of its own state, and a restore recomputes it: a file
that loads but whose bits changed since its save (silent corruption: torch.load
does not check the zip's CRC-32) is reported as ``checkpoint_corrupt`` and
skipped, and the restore falls back to the next older file.
"""
from __future__ import annotations

import hashlib
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from elastic_chaos.trainer import progress

FORMAT_VERSION = 1
ABANDONED_AFTER_S = 6 * 3600.0
"""A temporary untouched this long is abandoned whoever wrote it: a live save
writes continuously, and nothing pauses one for hours between its writes."""

_restored: dict[Path, frozenset[tuple[str, int, int]]] = {}
"""Per directory this process resumed from: the files above the resumed step
that its restore skipped, as (name, inode, mtime_ns): the rolled-back history."""

SUM_KEY = "sha256"
"""Where a save keeps the sha256 of its own state (:func:`state_digest`), with checksums on."""
_checksums = False
"""Whether saves carry their sum and restores verify it (:func:`use_checksums`)."""

_NAME = re.compile(r"^ckpt-(\d{8,})\.pt$")
_TEMP = re.compile(r"^\.ckpt-\d{8,}\.pt\.tmp\.(?:(?P<place>.+)\.)?(?P<pid>\d+)$")
"""``.ckpt-<step>.pt.tmp.<place>.<pid>``; names of older versions lack the place."""


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"ckpt-{step:08d}.pt"


def step_of(path: Path) -> int:
    """The step in a checkpoint file's name (ValueError for any other name)."""
    m = _NAME.match(path.name)
    if m is None:
        raise ValueError(f"{path.name} is not a checkpoint file name")
    return int(m[1])


def writer_place() -> str:
    """Where this process's PIDs mean something: the host name and the PID namespace.

    Two containers of one host (hostNetwork pods share the node's name) have
    separate PID namespaces, and a PID is only checked where it was issued.
    """
    host = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:64] or "unknown"
    try:
        return f"{host}.{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return host  # no /proc (not Linux): the host alone


def temporary_path(directory: Path, step: int, pid: int | None = None) -> Path:
    """Where this host's process ``pid`` (default: this one) writes ``step`` before the rename."""
    pid = os.getpid() if pid is None else pid
    return directory / f".{checkpoint_path(directory, step).name}.tmp.{writer_place()}.{pid}"


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
    ``step`` becomes the head of the history: stale files of higher steps are
    removed (see the module's docstring), and of the rest the ``keep`` (at
    least 1) newest well-formed ones stay, this one always among them.
    ``before_rename`` runs between the durable temporary file and the rename
    (the trainer's ``--save-delay`` pauses there to stand in for a large
    write). ``reason`` says why (periodic, sigterm, spot-rebalance, ...).
    """
    if keep < 1:
        raise ValueError(f"keep={keep}: a save keeps at least the checkpoint it wrote")
    final = checkpoint_path(directory, step)
    # started before the first touch of the folder: a save's time is all it spends on the volume
    progress.report_checkpoint_started(step, str(final), reason=reason)
    directory.mkdir(parents=True, exist_ok=True)
    remove_abandoned_temporaries(directory)  # first: frees the disk this write needs
    tmp = temporary_path(directory, step)
    payload = {"format_version": FORMAT_VERSION, "step": step, **state}
    if _checksums:
        payload[SUM_KEY] = state_digest(payload)
    with open(tmp, "wb") as f:
        torch.save(payload, f)
        f.flush()
        os.fsync(f.fileno())
    if before_rename is not None:
        before_rename()
    os.replace(tmp, final)
    _fsync_dir(directory)
    progress.report_checkpoint_saved(step, str(final), reason=reason)
    _prune(directory, step, keep)
    return final


def _prune(directory: Path, head: int, keep: int) -> None:
    """Remove stale files above ``head``, then all but the ``keep`` newest well-formed ones.

    The head is not checked: this save renamed it into place a moment ago (or
    another rank replaced it with its own complete file of the same step).
    Only the older files about to be kept are checked, and cheaply (see
    :func:`_defect`); files beyond ``keep`` are removed unread, so a save
    reads a few pickles, never every checkpoint's tensors.
    """
    rolled_back = _restored.get(directory.absolute())
    kept = 0
    for path in list_checkpoints(directory):
        step = step_of(path)
        if step > head:
            _remove_if_stale(path, head, rolled_back)
        elif kept >= keep:
            _remove(path, None)
        elif step == head:
            kept += 1
        else:
            kept += _keep_if_well_formed(path)


def _remove_if_stale(path: Path, head: int, rolled_back: frozenset[tuple[str, int, int]] | None) -> None:
    """Remove a file above ``head`` unless another writer wrote it after this process's restore."""
    if rolled_back is None:
        why = "no restore from this directory in this process"
    else:
        try:
            if _identity(path) not in rolled_back:
                return  # written since the restore: another live writer's
        except FileNotFoundError:
            return
        why = "the restore skipped it"
    _remove(path, f"stale: step {step_of(path)} is above step {head} just saved ({why})")


def _identity(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return path.name, st.st_ino, st.st_mtime_ns


def _keep_if_well_formed(path: Path) -> int:
    """1 if ``path`` counts towards ``keep``; a corrupt file is reported and removed (0)."""
    try:
        defect = _defect(path)
    except FileNotFoundError:
        return 0  # pruned by another rank meanwhile
    if defect is None:
        return 1
    progress.report_checkpoint_corrupt(str(path), defect)
    _remove(path, f"corrupt: {defect}")
    return 0


def _defect(path: Path) -> str | None:
    """Why ``path`` would not load, or None; reads the pickle, maps the tensors.

    ``mmap=True`` reads the zip's central directory (written last, so a
    truncated file has none) and the pickle (refused unless weights only,
    checked for our format), and maps the tensor data without reading it: a
    few kilobytes per file whatever the model size. Flipped bits inside
    tensor data go unnoticed here; :func:`load_newest` would still skip such
    a file at restore. Where mapping itself fails (a filesystem without
    mmap), a full load decides: a good file is never removed for that.
    """
    try:
        _read(path, mmap=True)
        return None
    except FileNotFoundError:
        raise
    except Exception:  # noqa: BLE001 - decided by the full load below
        pass
    try:
        _read(path, mmap=False)
    except FileNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to load is the defect
        return f"{type(exc).__name__}: {exc}"
    return None


def _remove(path: Path, why: str | None) -> None:
    """Unlink ``path``, reporting ``why`` when given; gone already is fine (another rank)."""
    try:
        path.unlink()
    except FileNotFoundError:
        return
    if why is not None:
        progress.emit("checkpoint_removed", path=str(path), reason=why)


def remove_abandoned_temporaries(directory: Path) -> list[Path]:
    """Remove the temporary files of saves whose writer is gone; returns those removed.

    Idempotent, and safe beside live writers: a temporary written from this
    host and PID namespace goes when its PID is not alive; any other (another
    host's, or an old name without the host) only when untouched for
    ``ABANDONED_AFTER_S``. A reused PID keeps a temporary until that age.
    """
    if not directory.is_dir():
        return []
    here, removed = writer_place(), []
    for path in directory.iterdir():
        m = _TEMP.match(path.name)
        try:
            why = _abandoned(path, m["place"], int(m["pid"]), here) if m else None
        except FileNotFoundError:
            continue  # renamed into place, or removed by another rank
        if why is not None:
            _remove(path, f"temporary of an interrupted save: {why}")
            removed.append(path)
    return removed


def _abandoned(path: Path, place: str | None, pid: int, here: str) -> str | None:
    age = time.time() - path.stat().st_mtime
    if age > ABANDONED_AFTER_S:
        return f"untouched for {age / 3600:.1f} h"
    if place == here and not _alive(pid):
        return f"its writer, pid {pid} on this host, is gone"
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def list_checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoint files, newest first (temporary files never match)."""
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir() if _NAME.match(p.name)]
    return sorted(found, key=step_of, reverse=True)


@dataclass(frozen=True)
class Loaded:
    step: int
    path: Path
    state: dict[str, Any]


def _read(path: Path, *, mmap: bool) -> tuple[int, dict[str, Any]]:
    """Load ``path`` (weights only); raises unless it is one of our checkpoints."""
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
        raise ValueError("not an elastic-chaos trainer checkpoint")
    return int(state["step"]), state


def use_checksums(on: bool) -> None:
    """Make this process's saves carry the sha256 of their state and its restores verify it (the
    trainer's ``--checkpoint-checksum``). A file saved without a sum still loads, unverified."""
    global _checksums
    _checksums = on


class ChecksumMismatch(ValueError):
    """A checkpoint that loads, but whose state is not the state its save summed: its bits changed."""


def state_digest(state: dict[str, Any]) -> str:
    """The sha256 of ``state`` without its own sum: every tensor's dtype, shape and bytes, every other
    value's repr, walked in key order (the same state saved and loaded gives the same digest)."""
    digest = hashlib.sha256()
    _feed(digest, {k: v for k, v in state.items() if k != SUM_KEY})
    return digest.hexdigest()


def _feed(digest: Any, value: object) -> None:
    if isinstance(value, torch.Tensor):
        flat = value.detach().cpu().contiguous().clone()   # its own compact storage: only its bytes
        digest.update(f"T{flat.dtype}{tuple(flat.shape)}:".encode())
        digest.update(bytes(flat.untyped_storage()))
    elif isinstance(value, dict):
        digest.update(f"D{len(value)}:".encode())
        for key in sorted(value, key=repr):
            digest.update(f"{key!r}=".encode())
            _feed(digest, value[key])
    elif isinstance(value, list | tuple):
        digest.update(f"L{len(value)}:".encode())
        for item in value:
            _feed(digest, item)
    else:
        digest.update(f"{type(value).__name__}:{value!r};".encode())


def _verify(state: dict[str, Any]) -> None:
    """ChecksumMismatch when ``state`` carries a sum its values no longer match."""
    saved = state.get(SUM_KEY)
    if _checksums and saved is not None and state_digest(state) != saved:
        raise ChecksumMismatch(f"its state's sha256 is not the one its save stored ({saved}): its bits changed "
                               "since the save; skipped for an older checkpoint (none: a fresh start)")


def load_newest(directory: Path) -> Loaded | None:
    """The newest checkpoint that loads and is well formed, or None for a fresh start.

    Every file skipped on the way is reported as ``checkpoint_corrupt``, and
    remembered as rolled back: the next save removes it, once a newer head is
    durable. Temporaries of dead writers are removed first.
    """
    remove_abandoned_temporaries(directory)
    skipped: set[tuple[str, int, int]] = set()
    found: Loaded | None = None
    for path in list_checkpoints(directory):
        try:
            seen = _identity(path)
            step, state = _read(path, mmap=False)
            _verify(state)
        except FileNotFoundError:
            continue  # pruned by another rank between listing and loading
        except Exception as exc:  # noqa: BLE001 - any unreadable file is skipped, loudly
            progress.report_checkpoint_corrupt(str(path), f"{type(exc).__name__}: {exc}")
            skipped.add(seen)
            continue
        found = Loaded(step=step, path=path, state=state)
        break
    _restored[directory.absolute()] = frozenset(skipped)
    return found
