"""Sharded checkpoints with ``torch.distributed.checkpoint`` (DCP): ``--checkpoint-format dcp``.

The shape modern training saves in: one folder per save, named for its step
(``<dir>/step-00000040/``), holding one shard per rank (``__<rank>_0.distcp``)
and the ``.metadata`` DCP's coordinator writes last; a save is complete when
its ``.metadata`` exists. A ``latest`` file in the directory names the folder
to resume from; it is replaced (temporary file, fsync, rename) only after the
save it names is complete, so it never names a partial save.

A periodic save is collective: every rank writes its shard (``async_save``
optional: the save goes on in a background thread while training continues,
and is finished, its pointer written, once its future is done; a save waits
for the previous one, and the job waits for the last one before it exits). An
emergency save (SIGTERM, a spot notice) is made by the rank that was told, on
its own (``no_dist``): into a temporary folder renamed into place, so ranks of
one node saving the same step at once leave one complete folder.

Pruning (rank 0, after a save is complete) keeps the ``keep`` newest complete
folders at or below the one ``latest`` names, and never touches that folder or
anything newer; partial folders below it (interrupted saves) are removed. A
folder it removes loses its ``.metadata`` first (fsynced), so a prune cut short
leaves a partial folder, never one that looks complete without its shards.

A restart resumes from the folder ``latest`` names, or, when the pointer is
missing or names a partial folder, from the newest complete folder; a folder
that fails to load is reported (``checkpoint_corrupt``) and the next older
complete one is tried.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.state_dict import get_state_dict, set_model_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import async_save as dcp_async_save
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.checkpoint.storage import WriteResult

from elastic_chaos.trainer import checkpoint, progress
from elastic_chaos.trainer.sampler import ElasticSampler

POINTER = "latest"
METADATA = ".metadata"
_FOLDER = re.compile(r"^step-(\d{8,})$")
_TEMP = re.compile(r"^\.(?:step-\d{8,}|latest)\.tmp\.(?P<place>.+)\.(?P<pid>\d+)$")
"""An emergency save's temporary folder, or the pointer's temporary file, of the writer at place/pid."""


def missing_requirement() -> str | None:
    """What this python lacks for DCP saves, said at the start (None: nothing). torch.distributed.checkpoint
    gathers every save's plan through numpy (``_tensor_to_object``); without it each save fails, steps
    into the run, with "Numpy is not available" (seen on the local cluster's image before it had numpy)."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        return ("--checkpoint-format dcp needs numpy in the nodes' python (torch.distributed.checkpoint gathers "
                "each save's plan with it): pip install numpy")
    return None


def step_folder(directory: Path, step: int) -> Path:
    return directory / f"step-{step:08d}"


def step_of(folder: Path) -> int:
    """The step in a save folder's name (ValueError for any other name)."""
    m = _FOLDER.match(folder.name)
    if m is None:
        raise ValueError(f"{folder.name} is not a DCP save folder name")
    return int(m[1])


def is_complete(folder: Path) -> bool:
    """Whether DCP's coordinator finished the save in ``folder`` (its ``.metadata`` is there)."""
    return (folder / METADATA).is_file()


def list_folders(directory: Path) -> list[Path]:
    """Every step folder, complete or not, newest first."""
    if not directory.is_dir():
        return []
    return sorted((p for p in directory.iterdir() if _FOLDER.match(p.name) and p.is_dir()), key=step_of,
                  reverse=True)


def read_pointer(directory: Path) -> Path | None:
    """The folder ``latest`` names (None: no pointer, or one that names no step folder)."""
    try:
        name = (directory / POINTER).read_text().strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    return directory / name if _FOLDER.match(name) else None


def write_pointer(directory: Path, folder: Path) -> None:
    """Point ``latest`` at ``folder`` atomically and durably; never moves it back to an older step."""
    current = read_pointer(directory)
    if current is not None and current != folder and step_of(current) > step_of(folder) and is_complete(current):
        return
    tmp = directory / f".{POINTER}.tmp.{checkpoint.writer_place()}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(folder.name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / POINTER)
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def resume_candidates(directory: Path) -> list[Path]:
    """Folders to try at a restart, in order: the one ``latest`` names when complete, then every
    complete folder, newest first (the pointer's own folder once)."""
    pointed = read_pointer(directory)
    complete = [f for f in list_folders(directory) if is_complete(f)]
    first = [pointed] if pointed is not None and pointed in complete else []
    return first + [f for f in complete if f not in first]


def agreed_candidates(directory: Path, group: dist.ProcessGroup | None) -> list[Path]:
    """:func:`resume_candidates` as rank 0 sees them, followed by every rank. The load is collective, so
    every rank must try the same save: a shared volume can show one node an older ``latest`` than another
    (a stale attribute cache), and ranks that each followed their own view trained one world from two
    states. A rank whose view differs says so on stderr."""
    mine = [f.name for f in resume_candidates(directory)]
    if not dist.is_available() or not dist.is_initialized():
        return [directory / name for name in mine]
    box: list[object] = [mine]
    dist.broadcast_object_list(box, src=0, group=group)
    agreed = [str(name) for name in box[0]] if isinstance(box[0], list) else mine
    if agreed != mine:
        print(f"rank {dist.get_rank()}: {directory} looks different here ({mine[:1] or ['nothing']} first) "
              f"than on rank 0 ({agreed[:1] or ['nothing']} first): resuming as rank 0 does", file=sys.stderr,
              flush=True)
    return [directory / name for name in agreed]


def prune(directory: Path, keep: int) -> None:
    """Keep the ``keep`` newest complete folders at or below the one ``latest`` names; remove the
    rest below it, partial folders below it included. Nothing at or above the pointer is touched;
    without a pointer nothing is removed. Idempotent; a folder gone already is fine."""
    pointed = read_pointer(directory)
    if pointed is None or not is_complete(pointed):
        return
    head, kept = step_of(pointed), 0
    for folder in list_folders(directory):
        step = step_of(folder)
        if step >= head:
            kept += step == head
            continue
        if is_complete(folder) and kept < keep:
            kept += 1
            continue
        why = None if is_complete(folder) else f"partial: no {METADATA}, below step {head} that {POINTER} names"
        _retire(folder)
        _remove_folder(folder, why)


def _retire(folder: Path) -> None:
    """Make ``folder`` a partial save, durably, before any of its shards goes: a prune killed half-way
    (kill-at-save-point's prune-mid-delete) must never leave a folder whose ``.metadata`` says complete
    and whose shards are gone (a restart falling back to it would meet a save that does not load)."""
    try:
        (folder / METADATA).unlink()
    except FileNotFoundError:
        return
    _fsync_dir(folder)


def _remove_folder(folder: Path, why: str | None) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    if why is not None:
        progress.emit("checkpoint_removed", path=str(folder), reason=why)


def _clear_stale(folder: Path) -> None:
    """Empty ``folder`` of an earlier save of its step (a history rolled back) before this one writes
    there, ``.metadata`` first: its files never mix with ours in a folder that looks complete. The
    folder itself stays (the other ranks may have created it already: DCP's writers make it in their
    local plan; none writes a shard before the coordinator's global plan, so none is written yet)."""
    if not folder.is_dir() or not any(folder.iterdir()):
        return
    (folder / METADATA).unlink(missing_ok=True)
    for entry in folder.iterdir():
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    progress.emit("checkpoint_removed", path=str(folder), reason=f"stale: step {step_of(folder)} is saved again")


def remove_abandoned_temporaries(directory: Path) -> None:
    """Remove the temporaries whose writer (on this host) is gone: an emergency save's folder, the
    pointer's file (a writer killed before its rename)."""
    if not directory.is_dir():
        return
    here = checkpoint.writer_place()
    for path in directory.iterdir():
        m = _TEMP.match(path.name)
        if m is None or m["place"] != here or checkpoint._alive(int(m["pid"])):  # noqa: SLF001
            continue
        why = f"temporary of an interrupted save: its writer, pid {m['pid']}, is gone"
        if path.is_dir():
            _remove_folder(path, why)
        else:
            path.unlink(missing_ok=True)
            progress.emit("checkpoint_removed", path=str(path), reason=why)


class _DelayedWriter(FileSystemWriter):
    """DCP's file writer, pausing between the shards and ``.metadata``: stands in for a large model's
    write, and holds open the window where shards exist and the save is not complete."""

    def __init__(self, folder: Path, delay: float) -> None:
        super().__init__(folder)
        self.delay = delay

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        time.sleep(self.delay)
        super().finish(metadata, results)


@dataclass
class _Pending:
    step: int
    folder: Path
    future: Future[Any]
    reason: str


class DcpCheckpointer:
    """The job's DCP saves and its restore. Collective calls (``save``, ``restore``) are made by every
    rank; rank 0 reports saves, writes the pointer and prunes. ``group``: the process group DCP uses
    (a gloo group of its own, so a save in flight never interleaves with DDP's collectives)."""

    def __init__(self, directory: Path, *, keep: int = 3, async_save: bool = False,
                 group: dist.ProcessGroup | None = None, save_delay: float = 0.0, pointer_early: bool = False) -> None:
        if keep < 1:
            raise ValueError(f"keep={keep}: pruning keeps at least the save latest names")
        self.directory = directory
        self.keep = keep
        self.async_save = async_save
        self.group = group
        self.save_delay = save_delay
        """Seconds the coordinator waits between the shards and ``.metadata`` (--save-delay)."""
        self.pointer_early = pointer_early
        """A bug on purpose (--pointer-early): ``latest`` names a save from its start, before it is complete."""
        self._pending: _Pending | None = None

    @property
    def _coordinator(self) -> bool:
        return dist.get_rank() == 0

    def save(self, step: int, state: dict[str, Any], *, reason: str = "periodic") -> None:
        """Save ``state`` as ``step``, collectively. Waits for the previous save first; blocks until
        durable unless ``async_save`` (then :meth:`poll` or :meth:`wait` finishes it)."""
        self.wait()
        state, folder = {**state, "step": step}, step_folder(self.directory, step)
        if self._coordinator:
            progress.report_checkpoint_started(step, str(folder), reason=reason)
            self.directory.mkdir(parents=True, exist_ok=True)
            _clear_stale(folder)
            if self.pointer_early:
                write_pointer(self.directory, folder)
        if self.async_save:
            future = dcp_async_save(state, storage_writer=self._writer(folder), process_group=self.group)
            if not isinstance(future, Future):
                raise TypeError(f"dcp.async_save returned {type(future).__name__}, not a Future")
            self._pending = _Pending(step, folder, future, reason)
            return
        dcp_save(state, storage_writer=self._writer(folder), process_group=self.group)
        self._finish(step, folder, reason)

    def _writer(self, folder: Path) -> FileSystemWriter:
        return _DelayedWriter(folder, self.save_delay) if self.save_delay else FileSystemWriter(folder)

    def poll(self) -> None:
        """Finish the save in flight if it is done (its pointer, its event, pruning); never blocks."""
        if self._pending is not None and self._pending.future.done():
            self.wait()

    def wait(self) -> None:
        """Block until the save in flight (if any) is done, then finish it; raises what it raised."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        pending.future.result()
        self._finish(pending.step, pending.folder, pending.reason)

    def _finish(self, step: int, folder: Path, reason: str) -> None:
        if not self._coordinator:
            return
        write_pointer(self.directory, folder)
        progress.report_checkpoint_saved(step, str(folder), reason=reason)
        prune(self.directory, self.keep)

    def save_alone(self, step: int, state: dict[str, Any], *, reason: str) -> None:
        """An emergency save by this rank alone (no collective): a temporary folder renamed into place,
        then the pointer. Blocks until durable; a complete folder of this step already there wins."""
        self.wait()
        state, folder = {**state, "step": step}, step_folder(self.directory, step)
        progress.report_checkpoint_started(step, str(folder), reason=reason)
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f".{folder.name}.tmp.{checkpoint.writer_place()}.{os.getpid()}"
        dcp_save(state, checkpoint_id=tmp, no_dist=True)
        if is_complete(folder):
            _remove_folder(tmp, None)
        else:
            shutil.rmtree(folder, ignore_errors=True)
            try:
                os.rename(tmp, folder)
            except OSError:  # another rank of this node renamed its own in between
                _remove_folder(tmp, None)
            _fsync_dir(self.directory)
        write_pointer(self.directory, folder)
        progress.report_checkpoint_saved(step, str(folder), reason=reason)


def template(model: nn.Module, optim: torch.optim.Optimizer, sampler: ElasticSampler,
             sched: torch.optim.lr_scheduler.LRScheduler) -> dict[str, Any]:
    """The job's state as DCP saves and loads it (model and optimizer keyed by parameter names)."""
    msd, osd = get_state_dict(model, optim)
    return {"model": msd, "optim": osd, "sched": sched.state_dict(), "rng": {"torch": torch.get_rng_state()},
            "sampler": sampler.state_dict()}


def _why(exc: BaseException) -> str:
    """A failed load in one line: its first line and, where it goes on (a CheckpointException holds every
    rank's traceback), its last, the root error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    said = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return said if len(lines) < 2 else f"{said} ... {lines[-1]}"


def restore(ckpt: DcpCheckpointer, model: nn.Module, optim: torch.optim.Optimizer, sampler: ElasticSampler,
            sched: torch.optim.lr_scheduler.LRScheduler, *, forget: frozenset[str] = frozenset()) -> int:
    """Load the save to resume from into the job's state (collective); its step, 0 for a fresh start.
    The parts named in ``forget`` are left out (--forget: a resume bug on purpose)."""
    remove_abandoned_temporaries(ckpt.directory)
    for folder in agreed_candidates(ckpt.directory, ckpt.group):
        state = {k: v for k, v in template(model, optim, sampler, sched).items() if k not in forget}
        try:
            dcp_load(state, checkpoint_id=folder, process_group=ckpt.group)
        except (Exception, CheckpointException) as exc:  # noqa: BLE001 - an unreadable save is skipped, loudly
            # CheckpointException (every rank's failure, gathered) derives from BaseException, not Exception
            progress.report_checkpoint_corrupt(str(folder), _why(exc))
            continue
        if "optim" in state:
            set_state_dict(model, optim, model_state_dict=state["model"], optim_state_dict=state["optim"])
        else:
            set_model_state_dict(model, state["model"])
        if "sched" in state:
            sched.load_state_dict(state["sched"])
        if "sampler" in state:
            sampler.load_state_dict(state["sampler"])
        if "rng" in state:
            torch.set_rng_state(state["rng"]["torch"])
        progress.report_checkpoint_loaded(step_of(folder), str(folder))
        return step_of(folder)
    progress.report_checkpoint_loaded(0, None)
    return 0
