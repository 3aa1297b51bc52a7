"""What the checkpoint watcher needs to know of saves that are folders, not files.

Modern training saves with ``torch.distributed.checkpoint`` (DCP): a folder of
shards (``__0_0.distcp``, one or more per rank) that DCP's coordinator completes
by writing ``.metadata`` last; until then the folder is a partial save. Such
folders are usually named for their step (``step-1000/``) and watched as a
glob (``--checkpoint 'checkpoints/step-*'``), with a small pointer file beside
them (``latest``) whose content names the folder to resume from: rewriting it
is no save of its own.
"""
from __future__ import annotations

import fnmatch
import glob
import re
from collections.abc import Collection, Iterable
from pathlib import Path

DCP_METADATA = ".metadata"
DCP_SHARD_SUFFIX = ".distcp"
POINTER_MAX_BYTES = 4096
"""A pointer file names a folder: a line, never more than this."""
_STEP_NAME = re.compile(r"(?i)(?:global[-_]?)?(?:step|steps|iter|iteration|checkpoint|ckpt)?[-_]?(\d+)")


def is_dcp_file(name: str) -> bool:
    """A file only a DCP folder holds: its ``.metadata`` (or a rank's ``__<r>.metadata``) or a shard."""
    return name == DCP_METADATA or name.endswith(DCP_SHARD_SUFFIX) or (name.startswith("__")
                                                                        and name.endswith(DCP_METADATA))


def dcp_folders(paths: Iterable[Path]) -> set[Path]:
    """The folders among the parents of ``paths`` that hold a DCP file."""
    return {p.parent for p in paths if is_dcp_file(p.name)}


def is_complete_dcp(folder: Path, files: Collection[Path]) -> bool:
    """Whether ``files`` (paths seen) hold ``folder``'s ``.metadata``: DCP writes it after every shard."""
    return folder / DCP_METADATA in files


def folder_step(folder: Path) -> int | None:
    """The step a save folder's name carries (``step-00000040``, ``step_1000``, ``checkpoint-500``,
    ``global_step200``, ``1000``), or None (``epoch-3``, ``final``)."""
    m = _STEP_NAME.fullmatch(folder.name)
    return int(m[1]) if m else None


def split_glob(path: Path) -> tuple[Path, tuple[str, ...]]:
    """``path`` as the folder to scan and the glob parts below it: ``ckpt/step-*`` -> (``ckpt``,
    ``("step-*",)``); a path without glob characters -> (itself, ())."""
    parts = path.parts
    for i, part in enumerate(parts):
        if glob.has_magic(part):
            return Path(*parts[:i]) if i else Path("."), tuple(parts[i:])
    return path, ()


def matches(relative: Path, pattern: tuple[str, ...]) -> bool:
    """Whether a file at ``relative`` (below the scanned folder) is, or lies under, what ``pattern`` names."""
    parts = relative.parts
    return len(parts) >= len(pattern) and all(fnmatch.fnmatchcase(p, g) for p, g in zip(parts, pattern, strict=False))


def pointer_target(path: Path, size: int) -> Path | None:
    """The folder a pointer file at ``path`` names (relative to the file's folder, or absolute),
    when it is one: small, one line of text naming a folder that exists; else None."""
    if size > POINTER_MAX_BYTES or size == 0:
        return None
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text or "\n" in text or "\0" in text:
        return None
    target = Path(text) if Path(text).is_absolute() else path.parent / text
    try:
        return target if target.is_dir() else None
    except OSError:
        return None
