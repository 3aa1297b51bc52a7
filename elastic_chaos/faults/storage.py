"""Faults of the checkpoint volume: slow, hung, full, failing, read-only.

Made the way Chaos Mesh's IOChaos makes them, in the kernel path: the job's checkpoint
folder is behind the storage layer (a FUSE passthrough mounted before the nodes start,
elastic_chaos.platforms.storage), and each fault sets a rule on it, so every process of a node,
torch's own writer included, meets the fault in ``open``, ``write``, ``fsync``,
``rename``. ``--target NODE`` scopes a fault to that node's processes; by default every
node meets it (the volume is shared, as EFS or FSx is). Each fault reverts by clearing
its rule: ops it held go on at once.

- ``slow-storage``: each operation of the classes ``--ops`` names waits ``--latency``
  seconds, and/or writes share a ``--throughput`` cap (an EFS burst credit run dry, a
  busy NFS server);
- ``storage-hang``: every operation blocks for ``--duration`` seconds, then they resume
  (a lost NFS server, a Lustre OST failover): writers sleep in the kernel, a SIGTERM
  handler runs only once the op returns;
- ``storage-full``: ENOSPC once ``--after-mb`` more MB were written (0: at once);
- ``storage-errors``: EIO (or ``--errno``) on the next ``--count`` operations of
  ``--ops``, or on a ``--fraction`` of them;
- ``storage-readonly``: EROFS for every write, create, rename, unlink (a volume
  remounted read-only after an error);
- ``kill-at-save-point``: the first save to reach a point of its protocol (after the
  create, mid-write, before the fsync, before or after the rename) is held there, its
  writer's node is killed (SIGKILL) while it is held, and the op is never done: the
  files are exactly what a crash at that point leaves. Aimed by the volume itself, not
  by timing.
"""
from __future__ import annotations

import errno as errnos
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from elastic_chaos.errors import InjectionFailed, SpecError, storagefs_errors
from elastic_chaos.events import Timeline
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.api import Fault, FaultPlan
from elastic_chaos.faults.shard import METADATA, is_complete_save
from elastic_chaos.options import DAY_S, MAX_SEED, option
from elastic_chaos.platforms.api import Hit, Platform
from elastic_chaos.platforms.capabilities import Capability, CheckpointStorage
from elastic_chaos.storagefs import ALL, Errors, Hang, Kind, Latency, NoSpace, ReadOnly, Rule, SavePoint, Throttle
from elastic_chaos.storagefs.rules import describe
from elastic_chaos.waiting import WaitTimeout

OP_CLASSES: dict[str, frozenset[Kind]] = {
    "write": frozenset({Kind.WRITE}), "read": frozenset({Kind.READ}), "fsync": frozenset({Kind.FSYNC, Kind.FSYNCDIR}),
    "rename": frozenset({Kind.RENAME}), "open": frozenset({Kind.OPEN, Kind.CREATE, Kind.OPENDIR}),
    "close": frozenset({Kind.FLUSH, Kind.RELEASE}), "list": frozenset({Kind.LOOKUP, Kind.READDIR, Kind.GETATTR}),
    "unlink": frozenset({Kind.UNLINK, Kind.RMDIR}), "all": ALL}
"""The operation classes ``--ops`` names, and the filesystem requests each covers."""


def parse_ops(text: str, option_name: str = "ops") -> frozenset[Kind]:
    """``write,fsync,rename`` as the requests those classes cover; SpecError naming the classes."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in OP_CLASSES]
    if not names or unknown:
        raise SpecError(f"{option_name} {text!r}: a comma list of {', '.join(OP_CLASSES)}")
    return frozenset().union(*(OP_CLASSES[n] for n in names))


@dataclass
class _StorageFault(Fault):
    """A rule (or two) on the checkpoint volume for ``node``'s processes or every node's."""

    node: str | None = None
    requires: ClassVar[type[Capability] | None] = CheckpointStorage

    def rules(self) -> tuple[Rule, ...]:
        raise NotImplementedError

    def _rules(self) -> tuple[Rule, ...]:
        """The rules, a value storagefs refuses said as the user's input (exit 2)."""
        with storagefs_errors():
            return self.rules()

    def _until(self) -> str:
        return f"cleared after {self.duration_s:g}s" if self.duration_s is not None else "cleared at teardown"

    def plan(self, platform: Platform) -> FaultPlan:
        who = f"the processes of {self.node}" if self.node else "every node"
        return FaultPlan(self.name, self.node, (*(f"{describe(r)} on the checkpoint volume for {who}"
                                                  for r in self._rules()), self._until()))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        storage = platform.capability(CheckpointStorage)
        hits = [storage.apply(self.name, rule, node=self.node) for rule in self._rules()]
        names = [h.detail["rule"] for h in hits]
        return FaultRecord(self.name, self.node, hits[0].at, hits[0],
                           {"rules": names, "duration_s": self.duration_s, **self.detail()})

    def detail(self) -> dict[str, object]:
        """What the fault's record keeps besides its rules (its options, for the report)."""
        return {}

    def _revert(self, platform: Platform, record: FaultRecord) -> Hit | None:
        storage = platform.capability(CheckpointStorage)
        names = record.detail.get("rules")
        hits = [storage.restore(self.name, str(n), node=record.target) for n in names or ()]
        return hits[-1] if hits else None


@dataclass
class SlowStorage(_StorageFault):
    """Each operation of ``ops`` waits ``latency_s``; writes share a throughput cap."""

    latency_s: float | None = option(0.5, "seconds each operation of the classes --ops names waits (none: no "
                                          "added latency)", flag="--latency", minimum=0, units="s", maximum=3600.0)
    ops: str = option("write,fsync,rename,open", "the operations that wait, a comma list of "
                      + ", ".join(OP_CLASSES), metavar="CLASSES")
    throughput_mb_s: float | None = option(None, "cap on the volume's write throughput in MB/s (none: no cap)",
                                           flag="--throughput", above=0, units=" MB/s", maximum=1e6)
    duration_s: float | None = option(30.0, "seconds the volume stays slow (none: until the end of the run)",
                                      flag="--duration", above=0, units="s", maximum=DAY_S)
    name: ClassVar[str] = "slow-storage"
    description: ClassVar[str] = ("slow checkpoint volume: added latency per operation and/or a write throughput "
                                  "cap, through a FUSE layer in the kernel path")

    def __post_init__(self) -> None:
        super().__post_init__()
        parse_ops(self.ops)
        if not self.latency_s and self.throughput_mb_s is None:
            raise SpecError("slow-storage needs a --latency above 0 or a --throughput cap (or both)")

    def rules(self) -> tuple[Rule, ...]:
        out: list[Rule] = []
        if self.latency_s:
            out.append(Latency(self.latency_s, ops=parse_ops(self.ops)))
        if self.throughput_mb_s is not None:
            out.append(Throttle(self.throughput_mb_s * 1e6))
        return tuple(out)

    def detail(self) -> dict[str, object]:
        return {"latency_s": self.latency_s, "ops": self.ops, "throughput_mb_s": self.throughput_mb_s}


@dataclass
class StorageHang(_StorageFault):
    """Every operation blocks for ``duration_s``, then they all go on."""

    duration_s: float | None = option(20.0, "seconds every operation of the volume blocks, then they resume "
                                            "(none: until the end of the run)", flag="--duration", above=0,
                                      units="s", maximum=DAY_S)
    ops: str = option("all", "the operations that block, a comma list of " + ", ".join(OP_CLASSES),
                      metavar="CLASSES")
    name: ClassVar[str] = "storage-hang"
    description: ClassVar[str] = ("hung checkpoint volume (a lost NFS server): every operation blocks in the "
                                  "kernel for the duration, then resumes")

    def __post_init__(self) -> None:
        super().__post_init__()
        parse_ops(self.ops)

    def rules(self) -> tuple[Rule, ...]:
        # the daemon ends the hang on time itself; the revert then finds it over
        return (Hang(seconds=self.duration_s, ops=parse_ops(self.ops)),)


@dataclass
class StorageFull(_StorageFault):
    """ENOSPC once ``after_mb`` more MB were written."""

    after_mb: float = option(0.0, "MB the volume still takes before it is full (0: full at once)", minimum=0,
                             units=" MB", maximum=1e9)
    duration_s: float | None = option(10.0, "seconds until space is freed again (none: until the end of the "
                                            "run)", flag="--duration", above=0, units="s", maximum=DAY_S)
    name: ClassVar[str] = "storage-full"
    description: ClassVar[str] = "full checkpoint volume: writes fail with ENOSPC (at once or after N more MB)"

    def rules(self) -> tuple[Rule, ...]:
        return (NoSpace(after_bytes=int(self.after_mb * 1e6)),)

    def detail(self) -> dict[str, object]:
        return {"after_mb": self.after_mb}


@dataclass
class StorageErrors(_StorageFault):
    """``errno`` for the next ``count`` operations of ``ops``, or a ``fraction`` of them."""

    count: int | None = option(None, "how many operations fail (default 1 when --fraction is not given)",
                               minimum=1, maximum=1_000_000_000)
    fraction: float | None = option(None, "the share of operations that fail instead of a count", above=0,
                                    maximum=1)
    errno: str = option("EIO", "the error they fail with (an errno name: EIO, ENOSPC, EROFS, ETIMEDOUT, ...)",
                        metavar="NAME")
    ops: str = option("write,fsync,close", "the operations that may fail, a comma list of "
                      + ", ".join(OP_CLASSES), metavar="CLASSES")
    seed: int = option(0, "seed of the --fraction draw (the same seed fails the same operations)", minimum=0,
                       maximum=MAX_SEED)
    duration_s: float | None = option(None, "seconds until the errors stop (none: once the count is spent, or at "
                                            "the end of the run)", flag="--duration", above=0, units="s", maximum=DAY_S)
    name: ClassVar[str] = "storage-errors"
    description: ClassVar[str] = "failing checkpoint volume: EIO on a count or a fraction of its operations"

    def __post_init__(self) -> None:
        super().__post_init__()
        parse_ops(self.ops)
        if self.count is not None and self.fraction is not None:
            raise SpecError("storage-errors takes --count or --fraction, not both")
        if self.count is None and self.fraction is None:
            self.count = 1
        if not isinstance(getattr(errnos, self.errno, None), int):
            raise SpecError(f"errno {self.errno!r}: an errno name such as EIO, ENOSPC, EROFS, ETIMEDOUT")

    def rules(self) -> tuple[Rule, ...]:
        return (Errors(errno=int(getattr(errnos, self.errno)), count=self.count, fraction=self.fraction,
                       seed=self.seed, ops=parse_ops(self.ops)),)

    def detail(self) -> dict[str, object]:
        return {"errno": self.errno, "count": self.count, "fraction": self.fraction, "ops": self.ops}


@dataclass
class StorageReadOnly(_StorageFault):
    """EROFS for every mutation; reads go on."""

    duration_s: float | None = option(10.0, "seconds until the volume is writable again (none: until the end of "
                                            "the run)", flag="--duration", above=0, units="s", maximum=DAY_S)
    name: ClassVar[str] = "storage-readonly"
    description: ClassVar[str] = ("read-only checkpoint volume: EROFS for every write, create, rename and unlink; "
                                  "reads go on")

    def rules(self) -> tuple[Rule, ...]:
        return (ReadOnly(),)


REFERENCE_TEMPORARIES = ".ckpt-*.tmp.*"
"""The reference trainer's temporary checkpoint files (elastic_chaos/trainer/checkpoint.py): what a save writes,
fsyncs and renames."""


@dataclass
class KillAtSavePoint(Fault):
    """Hold the first save that reaches ``point``, SIGKILL its writer's node while held, release."""

    node: str | None = None
    point: SavePoint = option(SavePoint.BEFORE_RENAME, "the point of the save the writer is killed at",
                              cli=False)
    path: str = option(REFERENCE_TEMPORARIES, "glob of the file a save writes before its rename, inside the "
                                              "volume (the reference trainer's temporaries by default)",
                       flag="--save-path", metavar="GLOB")
    after_bytes: int = option(1024, "mid-write: bytes of the file written when the writer is held", minimum=0,
                              maximum=2**50)
    wait_s: float = option(120.0, "how long to wait for a save to reach the point", above=0, units="s", maximum=DAY_S)
    hold_s: float = option(0.0, "how long the writer stays held before its node is killed (an asynchronous save: "
                                "training goes on meanwhile)", minimum=0, units="s", maximum=600)
    name: ClassVar[str] = "kill-at-save-point"
    description: ClassVar[str] = ("hard kill of the node writing a checkpoint, at an exact point of its save "
                                  "(after create, mid-write, before fsync, before or after the rename)")
    requires: ClassVar[type[Capability] | None] = CheckpointStorage

    def plan(self, platform: Platform) -> FaultPlan:
        who = f"{self.node}'s writer" if self.node else "the first writer"
        return FaultPlan(self.name, self.node, (
            f"hold {who} at {self.point.value} of a save to {self.path} (the volume holds the op)",
            "SIGKILL every process of the writer's node while it is held", "release the op (its writer is dead: "
            "it is not done)"))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        storage = platform.capability(CheckpointStorage)
        aimed = storage.aim(self.point, path=self.path, after_bytes=self.after_bytes, node=self.node)
        try:
            paused = storage.wait_writer(self.wait_s)
        except WaitTimeout as exc:
            storage.restore(self.name, aimed.detail["rule"], node=self.node)
            raise InjectionFailed(f"no save reached {self.point.value} on {self.path} within {self.wait_s:g}s: "
                                  "does the job save there (--save-path)?") from exc
        if paused.node is None:
            storage.release(paused.id)
            raise InjectionFailed(f"the writer held at {self.point.value} (pid {paused.pid}) belongs to no node "
                                  "of the job; released it")
        if self.hold_s:
            time.sleep(self.hold_s)   # bounded (at most 600 s); the writer is held all along
        hit = platform.kill_node(paused.node, graceful=False)
        released = storage.release(paused.id)
        files = sorted(p.name for p in storage.direct().iterdir() if not p.name.startswith("."))
        return FaultRecord(self.name, paused.node, hit.at, hit, {
            "point": self.point.value, "path": paused.path, "pid": paused.pid, "bytes": paused.bytes,
            "held_s": round(hit.at - paused.t, 3), "op_done": bool(released), "files": files,
            **folder_saves(storage.direct())})


POINTER = "latest"
POINTER_MAX_BYTES = 4096
SHARD_SUFFIX = ".distcp"
_SAVE_FOLDER = re.compile(r"^step-\d+$")


def _is_save_folder(folder: Path) -> bool:
    """A save folder: named for its step (``step-00000040``, empty while its save begins) or holding a DCP
    file; not another folder the volume holds (a run's ``workdir`` on the local cluster's volume)."""
    if folder.name.startswith("."):
        return False
    return bool(_SAVE_FOLDER.match(folder.name)) or any(
        f.name.endswith(SHARD_SUFFIX) or f.name == METADATA for f in folder.iterdir())


def folder_saves(volume: Path) -> dict[str, Any]:
    """The folder saves on ``volume`` at this moment (a DCP save is a folder, complete once its
    ``.metadata`` is there) and what a ``latest`` pointer file beside them names: what a crash left,
    for the verdict to hold the restart against. Empty where the volume holds no folder."""
    folders = sorted(p for p in volume.iterdir() if p.is_dir() and _is_save_folder(p))
    if not folders:
        return {}
    try:
        with open(volume / POINTER, "rb") as f:
            named: str | None = f.read(POINTER_MAX_BYTES).decode("utf-8", "replace").strip() or None
    except FileNotFoundError:
        named = None
    return {"complete": [p.name for p in folders if is_complete_save(p)],
            "partial": [p.name for p in folders if not is_complete_save(p)], "pointer": named,
            "shards": {p.name: sum(1 for f in p.iterdir() if f.name.endswith(SHARD_SUFFIX)) for p in folders}}
