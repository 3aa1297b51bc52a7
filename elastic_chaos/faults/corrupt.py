"""Silent data corruption: bits flipped inside a completed checkpoint on the shared volume.

- ``corrupt-checkpoint``: the newest checkpoint the job reported saved (its last
  ``checkpoint/saved`` event whose file is still there, inside the run's checkpoint folder) gets
  ``--bits`` bits flipped inside the tensor data of one of its tensors (seeded: the same seed
  and file flip the same bits). A disk, a controller or a network file system that returns
  other bytes than were written does this without an error.

The region is the tensor data (elastic_chaos.faults.torchfile): ``torch.load`` does not check the
zip's CRC-32 there, so the file still loads and the job trains on from other values unless it
checks a sum of its own. A flip in the pickle or a zip header would fail every load: a loud
corruption a restart already skips. By default the bits are mantissa bits of a float tensor (a
value off in its low digits, never inf or NaN: the corruption that goes unnoticed longest).

Nothing is lost: before the flip the file's original bytes are copied into the run's folder
(``corrupt-checkpoint/<file>.original``). At teardown the original is put back where the file
still holds exactly the corrupted bytes, so the checkpoint folder the run leaves is what the job
wrote; a file the job has since replaced or pruned is left as the job left it (its original stays
in the run's folder either way).
"""
from __future__ import annotations

import hashlib
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from elastic_chaos.errors import InjectionFailed
from elastic_chaos.events import CheckpointEv, Timeline
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.api import Fault, FaultPlan
from elastic_chaos.faults.torchfile import FLOATS, NotATorchFile, Storage, storages
from elastic_chaos.options import MAX_SEED, option
from elastic_chaos.platforms.api import CheckpointFolder, Hit, Platform

FOLDER = "corrupt-checkpoint"
"""Where the run's folder keeps the original bytes of each file the fault corrupted."""
MAX_BITS = 4096


@dataclass(frozen=True)
class Flip:
    """The bits flipped in one byte: the byte at ``offset`` of the file went from ``before`` to ``after``
    (``before ^ after == mask``)."""

    offset: int
    mask: int
    before: int
    after: int
    element: int
    """The index of the tensor element the byte belongs to (its storage's, flattened)."""

    @property
    def bits(self) -> tuple[int, ...]:
        return tuple(b for b in range(8) if self.mask >> b & 1)

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "bits": list(self.bits), "before": self.before, "after": self.after,
                "element": self.element}


def choose(found: list[Storage], *, seed: int, bits: int, state: str, any_bit: bool) -> tuple[Storage, list[int]]:
    """The storage to hit and the bit positions inside it (``bit index = byte * 8 + bit``), drawn from
    ``seed``: one tensor whose path starts with ``state`` (any where the file does not name its
    tensors), then ``bits`` distinct bits, mantissa bits of a float tensor unless ``any_bit``.
    InjectionFailed when no tensor matches."""
    rng = random.Random(seed)
    named = any(s.tensors for s in found)
    pool = [s for s in found if s.size and (not named or any(t.startswith(state) for t in s.tensors))]
    floats = [s for s in pool if s.kind in FLOATS]
    pool = floats if floats and not any_bit else pool
    if not pool:
        raise InjectionFailed(f"no tensor of the checkpoint matches --state {state!r}; it holds "
                              + ", ".join(t for s in found for t in s.tensors))
    target = rng.choice(sorted(pool, key=lambda s: s.name))
    width, mantissa = FLOATS.get(target.kind or "", (1, 8))
    if any_bit or target.kind not in FLOATS:
        width, mantissa = 1, 8
    elements = target.size // width
    total = elements * mantissa
    drawn = rng.sample(range(total), min(bits, total))
    return target, sorted((i // mantissa) * width * 8 + i % mantissa for i in drawn)


def flip(path: Path, storage: Storage, positions: list[int]) -> list[Flip]:
    """Flip the bits at ``positions`` of ``storage`` in the file at ``path`` (in place, fsynced); what each
    byte touched was and became (bits of one byte flipped together). Blocks on the file system."""
    width = FLOATS.get(storage.kind or "", (1, 0))[0]
    masks: dict[int, int] = {}
    for pos in positions:
        masks[pos // 8] = masks.get(pos // 8, 0) | 1 << pos % 8
    out: list[Flip] = []
    with open(path, "r+b") as f:
        for at, mask in sorted(masks.items()):
            f.seek(storage.offset + at)
            before = f.read(1)[0]
            f.seek(storage.offset + at)
            f.write(bytes([before ^ mask]))
            out.append(Flip(storage.offset + at, mask, before, before ^ mask, at // width))
        f.flush()
        os.fsync(f.fileno())
    return out


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def checkpoint_dir(platform: Platform) -> CheckpointFolder | None:
    """The job's checkpoint folder as this machine sees it, or None where the platform keeps it elsewhere."""
    return platform.checkpoint_folder()


def newest_saved(timeline: Timeline, folder: CheckpointFolder) -> tuple[Path, int | None]:
    """The newest checkpoint the job reported saved (highest step, then latest) whose file is still in
    ``folder`` (as this machine reads it); InjectionFailed when there is none."""
    saves = [e for e in timeline.select(CheckpointEv.SAVED) if e.data.path]
    saves.sort(key=lambda e: (e.data.step if e.data.step is not None else -1, e.t), reverse=True)
    for e in saves:
        path = folder.local(str(e.data.path))
        if path is not None and path.is_file():
            return path, e.data.step
    raise InjectionFailed(f"no checkpoint the job reported saved is in {folder.here} (saves seen: {len(saves)}); "
                          "corrupt-checkpoint needs a completed save (wait for one)")


def keep_original(path: Path, work_dir: Path, *, folder: str = FOLDER, name: str | None = None) -> Path:
    """Copy ``path`` into the run's ``folder`` before it is touched, as ``<name>.original`` (``name``:
    the file's own by default; a new name each time); the copy."""
    into, base = work_dir / folder, name or path.name
    into.mkdir(parents=True, exist_ok=True)
    copy, n = into / f"{base}.original", 1
    while copy.exists():
        n += 1
        copy = into / f"{base}.original.{n}"
    shutil.copy2(path, copy)
    with open(copy, "rb") as f:
        os.fsync(f.fileno())
    return copy


@dataclass
class CorruptCheckpoint(Fault):
    """Flip ``bits`` bits (seeded) in the tensor data of the newest complete checkpoint."""

    bits: int = option(3, "how many bits to flip", minimum=1, maximum=MAX_BITS)
    seed: int = option(0, "seed of the draw: which tensor, which bits (the same seed and file flip the same bits)",
                       minimum=0, maximum=MAX_SEED)
    state: str = option("model", "which tensors may be hit: those whose path in the checkpoint starts with this "
                                 "(model, optim, rng; '' for any)", metavar="PREFIX")
    any_bit: bool = option(False, "flip any bit of a float tensor (an exponent bit may make a value inf or NaN); "
                                  "by default only mantissa bits")
    name: ClassVar[str] = "corrupt-checkpoint"
    description: ClassVar[str] = ("silent data corruption: bits flipped in the tensor data of the newest complete "
                                  "checkpoint on the shared volume (it still loads)")

    def unavailable(self, platform: Platform) -> str | None:
        if checkpoint_dir(platform) is None:
            return (f"corrupt-checkpoint edits the job's checkpoint on this machine; the {platform.name} platform "
                    "does not keep it here (the local platform does, and the local cluster's shared folder)")
        return super().unavailable(platform)

    def plan(self, platform: Platform) -> FaultPlan:
        folder = checkpoint_dir(platform)
        where = folder.here if folder is not None else "the checkpoint folder"
        which = f"a tensor under {self.state!r}" if self.state else "any tensor"
        return FaultPlan(self.name, None, (
            f"flip {self.bits} {'' if self.any_bit else 'mantissa '}bit(s) (seed {self.seed}) in the data of {which} "
            f"of the newest checkpoint the job reported saved in {where}",
            f"keep its original bytes in the run's folder ({FOLDER}/)",
            "put them back at teardown where the file still holds exactly the corruption"))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        folder = checkpoint_dir(platform)
        if folder is None:
            raise InjectionFailed(self.unavailable(platform) or "no checkpoint folder on this machine")
        path, step = newest_saved(timeline, folder)
        try:
            target, positions = choose(storages(path), seed=self.seed, bits=self.bits, state=self.state,
                                       any_bit=self.any_bit)
        except NotATorchFile as exc:
            raise InjectionFailed(f"corrupt-checkpoint flips bits in torch.save files: {exc}") from None
        original = sha256(path)
        copy = keep_original(path, platform.work_dir)
        at = time.time()
        flips = flip(path, target, positions)
        action = f"flipped {len(positions)} bit(s) of {target.name} in {path.name}"
        return FaultRecord(self.name, None, at, Hit(node="", at=at, action=action), {
            "file": str(path), "step": step, "tensor": target.name, "member": target.member,
            "region": f"tensor data: bytes {target.offset}..{target.offset + target.size - 1} of the file",
            "flips": [f.to_json() for f in flips], "original": str(copy), "sha256_original": original,
            "sha256_corrupted": sha256(path), "bits": self.bits, "seed": self.seed, "any_bit": self.any_bit})

    def _revert(self, platform: Platform, record: FaultRecord) -> Hit | None:
        return restore(record.detail)


def restore(detail: dict[str, Any]) -> Hit | None:
    """Put the original bytes back where the file still holds exactly the corruption (atomically: a copy
    renamed over it); None where there is nothing to undo (the job replaced or pruned the file, or it
    was restored already). Idempotent."""
    path, copy = Path(str(detail.get("file"))), Path(str(detail.get("original")))
    try:
        if sha256(path) != detail.get("sha256_corrupted") or not copy.is_file():
            return None
    except FileNotFoundError:
        return None
    put_back(copy, path)
    return Hit(node="", at=time.time(), action=f"restored the original bytes of {path.name} from {copy.name}")


def put_back(copy: Path, path: Path) -> None:
    """``path`` made ``copy``'s bytes again, atomically: a synced copy beside it renamed over it (a reader
    sees the damaged file or the original, never half of one)."""
    tmp = path.with_name(f".{path.name}.restore.{os.getpid()}")
    shutil.copy2(copy, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
