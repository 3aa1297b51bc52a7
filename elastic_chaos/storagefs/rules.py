"""The fault rules a storage mount applies, as frozen specs that travel as JSON.

A rule says what goes wrong (a delay, a throughput cap, a hang, an errno, a
pause at a point of a save) and for which operations: ``ops`` (the kinds of
filesystem request it touches) and ``path`` (a glob, :func:`fnmatch.fnmatchcase`,
over the path inside the mount: ``ckpt-*.pt``, ``run/.*.tmp.*``; ``*`` is every
path, ``/`` included). Rules are named when set, several can be active at once,
and clearing one reverts it at once: ops it held or slowed resume.

The controller builds these and sends :func:`to_json`; the daemon rebuilds them
with :func:`from_json`, which refuses anything malformed with a message.
"""
from __future__ import annotations

import enum
import errno as errnos
import fnmatch
import math
from dataclasses import dataclass, field, fields
from typing import Any

from elastic_chaos.storagefs.errors import RuleError


class Kind(str, enum.Enum):
    """A kind of filesystem request, as rules select them and the op log names them."""

    LOOKUP = "lookup"
    GETATTR = "getattr"
    SETATTR = "setattr"
    READLINK = "readlink"
    SYMLINK = "symlink"
    MKNOD = "mknod"
    MKDIR = "mkdir"
    UNLINK = "unlink"
    RMDIR = "rmdir"
    RENAME = "rename"
    LINK = "link"
    OPEN = "open"
    CREATE = "create"
    READ = "read"
    WRITE = "write"
    STATFS = "statfs"
    FLUSH = "flush"
    RELEASE = "release"
    FSYNC = "fsync"
    OPENDIR = "opendir"
    READDIR = "readdir"
    RELEASEDIR = "releasedir"
    FSYNCDIR = "fsyncdir"
    FALLOCATE = "fallocate"
    LSEEK = "lseek"


ALL = frozenset(Kind)
MUTATING = frozenset({Kind.SETATTR, Kind.SYMLINK, Kind.MKNOD, Kind.MKDIR, Kind.UNLINK, Kind.RMDIR, Kind.RENAME,
                      Kind.LINK, Kind.CREATE, Kind.WRITE, Kind.FALLOCATE})
"""What a read-only filesystem refuses (and an OPEN for writing)."""
DATA = frozenset({Kind.READ, Kind.WRITE, Kind.FSYNC, Kind.FSYNCDIR, Kind.FLUSH})


class SavePoint(str, enum.Enum):
    """A point of the save protocol (write a temporary file, fsync, rename, fsync the folder)."""

    AFTER_CREATE = "after-create"
    """The file was created (empty) and the open has not returned yet."""
    MID_WRITE = "mid-write"
    """Exactly ``after_bytes`` bytes of the file were written through one handle; the rest waits."""
    BEFORE_FSYNC = "before-fsync"
    """An fsync of the file was asked for and has not been done."""
    BEFORE_RENAME = "before-rename"
    """A rename from or to a matching path was asked for and has not been done."""
    AFTER_RENAME = "after-rename"
    """The rename was done; the folder's fsync has not been asked for yet (its return waits)."""
    BEFORE_UNLINK = "before-unlink"
    """An unlink of a matching path was asked for and has not been done (a save's clean-up: pruning)."""


def _check_path(path: str) -> None:
    if not isinstance(path, str) or not path or path.startswith("/"):
        raise RuleError(f"path pattern {path!r}: a glob over paths inside the mount (`*`, `ckpt-*.pt`, "
                        "`sub/*.tmp*`), without a leading /")


def _check_ops(ops: frozenset[Kind]) -> None:
    if not ops or not all(isinstance(k, Kind) for k in ops):
        raise RuleError(f"ops {sorted(ops)!r}: give one or more of {', '.join(k.value for k in Kind)}")


def _finite(name: str, value: float, *, minimum: float = 0.0, above: bool = False) -> None:
    bad = not math.isfinite(value) or value < minimum or (above and value == minimum)
    if bad:
        raise RuleError(f"{name} = {value!r}: must be a finite number {'>' if above else '>='} {minimum:g}")


@dataclass(frozen=True)
class Latency:
    """Every matching op waits ``delay_s`` before it is done (added latency of a slow volume)."""

    delay_s: float
    ops: frozenset[Kind] = ALL
    path: str = "*"

    def __post_init__(self) -> None:
        _finite("delay_s", self.delay_s)
        _check_ops(self.ops)
        _check_path(self.path)


@dataclass(frozen=True)
class Throttle:
    """Writes through matching paths share ``bytes_per_s``: each write waits until the bytes
    written before it have had their time at the cap, so a save of N bytes takes at least
    N / ``bytes_per_s`` (the first write of a burst goes at once)."""

    bytes_per_s: float
    path: str = "*"
    ops: frozenset[Kind] = field(default=frozenset({Kind.WRITE}), init=False)

    def __post_init__(self) -> None:
        _finite("bytes_per_s", self.bytes_per_s, above=True)
        _check_path(self.path)


@dataclass(frozen=True)
class Hang:
    """Matching ops block (a lost NFS server) until the rule is cleared, or for ``seconds``
    after it was set; then they go on as if nothing happened. A caller killed meanwhile
    gets EINTR at once (NFS waits are killable too)."""

    seconds: float | None = None
    ops: frozenset[Kind] = ALL
    path: str = "*"

    def __post_init__(self) -> None:
        if self.seconds is not None:
            _finite("seconds", self.seconds, above=True)
        _check_ops(self.ops)
        _check_path(self.path)


@dataclass(frozen=True)
class NoSpace:
    """ENOSPC for writes (and fallocate) once ``after_bytes`` more bytes were written; the
    write that crosses the budget is short (as on a real full disk), the next fails."""

    after_bytes: int = 0
    path: str = "*"
    ops: frozenset[Kind] = field(default=frozenset({Kind.WRITE, Kind.FALLOCATE}), init=False)

    def __post_init__(self) -> None:
        _finite("after_bytes", self.after_bytes)
        _check_path(self.path)


@dataclass(frozen=True)
class Errors:
    """``errno`` (EIO unless said) for matching ops: the next ``count`` of them, or each with
    probability ``fraction`` (a random stream seeded by ``seed``: the same run, the same hits)."""

    errno: int = errnos.EIO
    fraction: float | None = None
    count: int | None = None
    seed: int = 0
    ops: frozenset[Kind] = DATA
    path: str = "*"

    def __post_init__(self) -> None:
        if (self.fraction is None) == (self.count is None):
            raise RuleError("Errors needs exactly one of fraction (0 < f <= 1) or count (>= 1)")
        if self.fraction is not None and not (0 < self.fraction <= 1):
            raise RuleError(f"fraction = {self.fraction!r}: must be in (0, 1]")
        if self.count is not None and self.count < 1:
            raise RuleError(f"count = {self.count!r}: must be >= 1")
        if self.errno not in errnos.errorcode:
            raise RuleError(f"errno = {self.errno!r}: not an errno number (errno.EIO is {errnos.EIO})")
        _check_ops(self.ops)
        _check_path(self.path)


@dataclass(frozen=True)
class ReadOnly:
    """EROFS for every mutating op and every open for writing (a volume remounted read-only)."""

    path: str = "*"
    ops: frozenset[Kind] = field(default=MUTATING, init=False)

    def __post_init__(self) -> None:
        _check_path(self.path)


@dataclass(frozen=True)
class CrashPoint:
    """Pause the first op that reaches ``point`` on a matching path, report who (PID, file,
    point) and hold it until released; one-shot. A caller killed while held gets EINTR and
    the op is not done, so the file is exactly as a crash at that point leaves it."""

    point: SavePoint
    path: str = "*"
    after_bytes: int = 0
    """For ``mid-write``: how many bytes of the file are written before the pause."""
    ops: frozenset[Kind] = field(default=frozenset({Kind.CREATE, Kind.OPEN, Kind.WRITE, Kind.FSYNC, Kind.RENAME,
                                                    Kind.UNLINK}), init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.point, SavePoint):
            raise RuleError(f"point {self.point!r}: one of {', '.join(p.value for p in SavePoint)}")
        _finite("after_bytes", self.after_bytes)
        _check_path(self.path)


@dataclass(frozen=True)
class StaleRead:
    """Reads through a stale cache, from the moment the rule is set until it is cleared: an NFS
    client's attribute, lookup and data caches that are never revalidated (``nocto``, a long
    ``actimeo``), an eventually consistent object store behind a FUSE mount. For the callers it
    covers (a node's, or every node's: a caller of no node, the toolkit itself, always sees the
    volume as it is), every path matching ``path`` that was changed after the rule was set
    reads as it was then:

    - a file replaced by a rename, rewritten in place (opened for writing, truncated) or
      removed reads back its old bytes (the old inode is kept, or a copy of it taken before
      the first write);
    - a name that did not exist then is not there (ENOENT, as a cached negative lookup or a
      cached listing answers);
    - a listing shows the folder as it was (new names left out, removed ones still in, a
      replaced one with its old inode number).

    Each node sees its own changes: a path its callers changed (or tried to, and were refused
    because it exists) is read afresh by that node from then on, as an NFS client's own writes
    update its own cache. Inside a folder made since the rule was set nothing is stale (nothing
    of it was cached): a node that sees the folder sees its contents as they are. Opening an old
    version for writing is answered ESTALE, as a write through a stale NFS file handle is (the
    kernel retries with a fresh lookup, which then finds the file as it is). Attributes of
    folders (size, times) are not staled."""

    path: str = "*"
    ops: frozenset[Kind] = field(default=frozenset({Kind.LOOKUP, Kind.READDIR}), init=False)

    def __post_init__(self) -> None:
        _check_path(self.path)


Rule = Latency | Throttle | Hang | NoSpace | Errors | ReadOnly | CrashPoint | StaleRead
KINDS: dict[str, type[Rule]] = {"latency": Latency, "throttle": Throttle, "hang": Hang, "no-space": NoSpace,
                                "errors": Errors, "read-only": ReadOnly, "crash-point": CrashPoint,
                                "stale-read": StaleRead}
_NAMES = {cls: name for name, cls in KINDS.items()}


def matches(pattern: str, *paths: str | None) -> bool:
    """Whether any of ``paths`` (inside the mount, no leading /) matches ``pattern``."""
    return any(p is not None and fnmatch.fnmatchcase(p, pattern) for p in paths)


def describe(rule: Rule) -> str:
    """The rule in words, as the timeline and the op log say it: ``latency delay_s=0.5, ops=[write]``."""
    fields_ = {k: v for k, v in to_json(rule).items() if k != "kind"}
    return " ".join([_NAMES[type(rule)], ", ".join(f"{k}={v}" for k, v in fields_.items())]).strip()


def to_json(rule: Rule) -> dict[str, Any]:
    """A plain dict for the control channel (``kind`` names the rule type)."""
    out: dict[str, Any] = {"kind": _NAMES[type(rule)]}
    for f in fields(rule):
        if not f.init:
            continue
        value = getattr(rule, f.name)
        if isinstance(value, frozenset):
            value = sorted(k.value for k in value)
        elif isinstance(value, enum.Enum):
            value = value.value
        out[f.name] = value
    return out


def from_json(raw: Any) -> Rule:
    """The rule ``raw`` describes; RuleError saying what is wrong otherwise."""
    if not isinstance(raw, dict) or raw.get("kind") not in KINDS:
        raise RuleError(f"not a rule: {raw!r}; `kind` is one of {', '.join(KINDS)}")
    cls = KINDS[raw["kind"]]
    known = {f.name: f for f in fields(cls) if f.init}
    extra = set(raw) - set(known) - {"kind"}
    if extra:
        raise RuleError(f"{raw['kind']} rule: unknown field(s) {', '.join(sorted(extra))}")
    args: dict[str, Any] = {}
    try:
        for name, value in raw.items():
            if name == "ops":
                args[name] = frozenset(Kind(v) for v in value)
            elif name == "point":
                args[name] = SavePoint(value)
            elif name != "kind":
                args[name] = value
        return cls(**args)
    except (TypeError, ValueError) as exc:
        raise RuleError(f"{raw['kind']} rule {raw!r}: {exc}") from exc
