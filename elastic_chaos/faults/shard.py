"""A sharded save broken on the volume: one shard of the newest complete DCP save deleted or truncated.

- ``damage-shard``: the newest save the job reported saved that is a complete DCP folder (a
  ``step-<step>/`` folder with its ``.metadata``, inside the run's checkpoint folder) loses one rank's
  shard (``__<rank>_0.distcp``): ``--shard-action delete`` removes the file, ``truncate`` cuts it to half
  its length. The folder still looks complete (its ``.metadata`` is there): a volume that lost a file
  or the tail of one (an object store's partial upload, a full disk, an operator's clean-up) leaves
  that. A job that takes ``.metadata`` for "whole" then fails to load it, or worse, loads what is left.

Nothing is lost: before the damage the shard's original bytes are copied into the run's folder
(``damage-shard/<step folder>.<shard>.original``). At teardown they are put back where the shard
still is exactly as damaged (deleted: still missing from a folder whose ``.metadata`` is the one the
fault saw; truncated: still the truncated bytes), so the checkpoint folder the run leaves is what the
job wrote; a folder the job has since saved again or pruned is left as the job left it.
"""
from __future__ import annotations

import enum
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from elastic_chaos.errors import InjectionFailed
from elastic_chaos.events import CheckpointEv, Timeline
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.api import Fault, FaultPlan
from elastic_chaos.faults.corrupt import checkpoint_dir, keep_original, put_back, sha256
from elastic_chaos.options import option
from elastic_chaos.platforms.api import CheckpointFolder, Hit, Platform

FOLDER = "damage-shard"
"""Where the run's folder keeps the original bytes of each shard the fault damaged."""
METADATA = ".metadata"
MAX_RANK = 65535


class ShardAction(str, enum.Enum):
    """What happens to the shard."""

    DELETE = "delete"
    """The file is removed."""
    TRUNCATE = "truncate"
    """The file is cut to half its length (what a write that stopped half-way leaves)."""


def shard_name(rank: int) -> str:
    """The file torch.distributed.checkpoint's FileSystemWriter writes for ``rank`` (one file per rank)."""
    return f"__{rank}_0.distcp"


def is_complete_save(folder: Path) -> bool:
    return folder.is_dir() and (folder / METADATA).is_file()


def newest_complete(timeline: Timeline, folder: CheckpointFolder) -> tuple[Path, int | None]:
    """The newest save the job reported saved (highest step, then latest) that is a complete DCP folder
    inside ``folder`` (as this machine reads it); InjectionFailed when there is none."""
    saves = [e for e in timeline.select(CheckpointEv.SAVED) if e.data.path]
    saves.sort(key=lambda e: (e.data.step if e.data.step is not None else -1, e.t), reverse=True)
    for e in saves:
        path = folder.local(str(e.data.path))
        if path is not None and is_complete_save(path):
            return path, e.data.step
    raise InjectionFailed(f"no complete DCP save the job reported is in {folder.here} (saves seen: {len(saves)}); "
                          "damage-shard needs a job that saves with --checkpoint-format dcp and a completed save")


def newest_intact(folder: Path, damaged: Path) -> int | None:
    """The highest step of the other complete step folders in ``folder`` (the save a restart can load
    whole), None when there is none."""
    steps = []
    for p in folder.glob("step-*"):
        tail = p.name.removeprefix("step-")
        if p != damaged and tail.isdigit() and is_complete_save(p):
            steps.append(int(tail))
    return max(steps, default=None)


def damage(path: Path, action: ShardAction) -> int | None:
    """Delete or truncate the shard at ``path`` (fsynced); its length after (None: deleted)."""
    if action is ShardAction.DELETE:
        path.unlink()
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return None
    size = path.stat().st_size // 2
    with open(path, "r+b") as f:
        f.truncate(size)
        f.flush()
        os.fsync(f.fileno())
    return size


@dataclass
class DamageShard(Fault):
    """Delete or truncate one rank's shard of the newest complete DCP save."""

    shard_action: ShardAction = option(ShardAction.DELETE, "what happens to the shard: delete (the file removed) "
                                                           "or truncate (cut to half its length)")
    shard_rank: int = option(1, "whose shard: the rank that wrote it (__<rank>_0.distcp)", minimum=0,
                             maximum=MAX_RANK)
    name: ClassVar[str] = "damage-shard"
    description: ClassVar[str] = ("a sharded save broken on the volume: one rank's shard of the newest complete DCP "
                                  "save deleted or truncated (its .metadata stays)")

    def unavailable(self, platform: Platform) -> str | None:
        if checkpoint_dir(platform) is None:
            return (f"damage-shard edits the job's checkpoint on this machine; the {platform.name} platform "
                    "does not keep it here (the local platform does, and the local cluster's shared folder)")
        return super().unavailable(platform)

    def plan(self, platform: Platform) -> FaultPlan:
        folder = checkpoint_dir(platform)
        where = folder.here if folder is not None else "the checkpoint folder"
        return FaultPlan(self.name, None, (
            f"{self.shard_action.value} {shard_name(self.shard_rank)} of the newest complete DCP save the job "
            f"reported saved in {where}",
            f"keep its original bytes in the run's folder ({FOLDER}/)",
            "put them back at teardown where the shard is still exactly as damaged"))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        folder = checkpoint_dir(platform)
        if folder is None:
            raise InjectionFailed(self.unavailable(platform) or "no checkpoint folder on this machine")
        save, step = newest_complete(timeline, folder)
        shard = save / shard_name(self.shard_rank)
        if not shard.is_file():
            held = ", ".join(sorted(p.name for p in save.glob("*.distcp"))) or "none"
            raise InjectionFailed(f"{save.name} holds no shard of rank {self.shard_rank} (its shards: {held}); "
                                  "give --shard-rank one of the job's ranks")
        original, size = sha256(shard), shard.stat().st_size
        copy = keep_original(shard, platform.work_dir, folder=FOLDER, name=f"{save.name}.{shard.name}")
        intact = newest_intact(save.parent, save)
        at = time.time()
        after = damage(shard, self.shard_action)
        done = "deleted" if after is None else f"truncated to {after} of {size} bytes"
        return FaultRecord(self.name, None, at, Hit(node="", at=at, action=f"{done}: {shard.name} of {save.name}"), {
            "file": str(shard), "folder": str(save), "step": step, "rank": self.shard_rank,
            "action": self.shard_action.value, "size_before": size, "size_after": after,
            "original": str(copy), "sha256_original": original,
            "sha256_damaged": None if after is None else sha256(shard),
            "sha256_metadata": sha256(save / METADATA), "newest_intact_step": intact})

    def _revert(self, platform: Platform, record: FaultRecord) -> Hit | None:
        return restore(record.detail)


def still_damaged(detail: dict[str, Any]) -> bool:
    """Whether the shard is still exactly as the fault left it (the job neither saved that step again nor
    pruned it)."""
    path, folder = Path(str(detail.get("file"))), Path(str(detail.get("folder")))
    try:
        if detail.get("sha256_damaged") is None:
            return not path.exists() and sha256(folder / METADATA) == detail.get("sha256_metadata")
        return sha256(path) == detail.get("sha256_damaged")
    except FileNotFoundError:
        return False


def restore(detail: dict[str, Any]) -> Hit | None:
    """Put the shard's original bytes back where it is still as damaged (atomically: a copy renamed into
    place); None where there is nothing to undo. Idempotent."""
    path, copy = Path(str(detail.get("file"))), Path(str(detail.get("original")))
    if not copy.is_file() or not still_damaged(detail):
        return None
    put_back(copy, path)
    return Hit(node="", at=time.time(), action=f"restored {path.name} of {path.parent.name} from {copy.name}")
