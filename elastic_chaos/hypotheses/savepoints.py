"""Every crash point of a save: the writing node killed at an exact point of its save protocol.

The reference trainer saves a checkpoint as a temporary file, fsynced, renamed into
place, then the folder fsynced (elastic_chaos/trainer/checkpoint.py). With its checkpoint folder
behind the storage layer, the volume itself holds the first save that reaches a point
(after the create, mid-write, before the fsync, before the rename, after the rename),
the writer's node is killed while held and the op is never done: the files are exactly
what a crash there leaves (elastic_chaos.faults.storage ``kill-at-save-point``). For each point:
the restart resumes from the newest *complete* checkpoint on the volume at the kill
(never the partial one), the steps lost are bounded, nothing hangs (the job recovers in
time), no restart meets a corrupt file, and the killed writer's temporary is tidied up.
This replaces timing-based aiming (``kill-during-checkpoint``) where the layer can aim.

With ``--checkpoint-format dcp`` the matrix is a sharded save's (elastic_chaos/trainer/dcp_checkpoint.py:
every rank writes its shard, the coordinator writes ``.metadata`` last through a temporary and a
rename, then moves the ``latest`` pointer the same way): a shard half written or not yet fsynced,
every shard written but ``.metadata`` not renamed into place (the folder is a partial save), the
save complete but ``latest`` not moved to it, the pointer written but not renamed, renamed but its
folder not fsynced. Each restart resumes from a save that was complete at the kill, no older than
the one ``latest`` named and no newer than the newest complete one: never from a partial folder.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_chaos.errors import SpecError
from elastic_chaos.events import CheckpointEv, ProgressEv
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.storage import folder_saves
from elastic_chaos.hypotheses.api import Trial, hypothesis
from elastic_chaos.options import option, validate
from elastic_chaos.platforms.capabilities import CheckpointStorage
from elastic_chaos.spec import CheckpointFormat
from elastic_chaos.storagefs import SavePoint

ORDER = (SavePoint.AFTER_CREATE, SavePoint.MID_WRITE, SavePoint.BEFORE_FSYNC, SavePoint.BEFORE_RENAME,
         SavePoint.AFTER_RENAME)
"""A file save's points in the order it reaches them."""
_CHECKPOINT = re.compile(r"^ckpt-(\d{8,})\.pt$")
"""The reference trainer's complete checkpoints (elastic_chaos/trainer/checkpoint.py)."""
_FOLDER = re.compile(r"^step-(\d{8,})$")
"""The reference trainer's DCP save folders (elastic_chaos/trainer/dcp_checkpoint.py)."""


@dataclass(frozen=True)
class DcpPoint:
    """A point of the reference trainer's DCP save: the volume's crash point on the files it writes."""

    name: str
    point: SavePoint
    path: str
    """The glob (inside the volume) of the file the save writes at that point."""
    leaves: str
    """What a crash there leaves, in words."""
    after_bytes: int = 0
    prunes: bool = False
    """The point is in the pruning of an old save: ``path`` is a glob below the folder the next prune
    removes (the oldest complete one when the point is aimed)."""


_SHARDS = "step-*/__*_*.distcp"
_METADATA = "step-*/.metadata*"        # DCP writes .metadata.tmp and renames it to .metadata
_POINTER = ".latest.tmp.*"            # the trainer's pointer temporary, renamed to latest
DCP_ORDER = (
    DcpPoint("shard-mid-write", SavePoint.MID_WRITE, _SHARDS, "a rank's shard half written, no .metadata",
             after_bytes=512),
    DcpPoint("shard-before-fsync", SavePoint.BEFORE_FSYNC, _SHARDS,
             "a rank's shard written, not fsynced, no .metadata"),
    DcpPoint("metadata-before-rename", SavePoint.BEFORE_RENAME, _METADATA,
             "every shard written, .metadata not renamed into place: a partial save"),
    DcpPoint("metadata-after-rename", SavePoint.AFTER_RENAME, _METADATA,
             "the save complete, latest not yet moved to it"),
    DcpPoint("pointer-before-rename", SavePoint.BEFORE_RENAME, _POINTER,
             "the save complete, the new pointer written beside latest and not renamed"),
    DcpPoint("pointer-after-rename", SavePoint.AFTER_RENAME, _POINTER,
             "latest names the new save, its folder not yet fsynced"),
    DcpPoint("prune-metadata", SavePoint.BEFORE_UNLINK, ".metadata",
             "the oldest save being pruned, held at the unlink of its .metadata (a prune that removes the shards "
             "first has removed them by then)", prunes=True),
    DcpPoint("prune-shard", SavePoint.BEFORE_UNLINK, "__*_*.distcp",
             "the oldest save being pruned, held at the unlink of one of its shards (a prune that removes "
             ".metadata first has made it partial by then)", prunes=True),
)
"""The DCP save's points in the order a save reaches them."""


def parse_points(text: str, *, dcp: bool = False) -> tuple[SavePoint | DcpPoint, ...]:
    """``all`` or a comma list of point names, in the order given, of a file save or (``dcp``) of a
    DCP save; SpecError naming them."""
    order: tuple[SavePoint | DcpPoint, ...] = DCP_ORDER if dcp else ORDER
    if text.strip() == "all":
        return order
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = {p.name if isinstance(p, DcpPoint) else p.value: p for p in order}
    bad = [n for n in names if n not in known]
    if not names or bad:
        other = {p.name for p in DCP_ORDER} if not dcp else {p.value for p in ORDER}
        hint = ((" (a DCP save's point: give --checkpoint-format dcp)" if not dcp else
                 " (a file save's point: the job saves with --checkpoint-format dcp)")
                if set(bad) & other else "")
        raise SpecError(f"points {text!r}: all, or a comma list of {', '.join(known)}{hint}")
    return tuple(known[n] for n in names)


@dataclass(frozen=True)
class Points:
    points: str = option("all", "the points of the save to kill the writer at, one kill each in this order: all, "
                                "or a comma list of " + ", ".join(p.value for p in ORDER) + "; with "
                                "--checkpoint-format dcp: " + ", ".join(p.name for p in DCP_ORDER),
                         metavar="POINTS")

    def __post_init__(self) -> None:
        validate(self)
        names = {n.strip() for n in self.points.split(",") if n.strip()}
        if not names or not names <= {"all"} | {p.value for p in ORDER} | {p.name for p in DCP_ORDER}:
            raise SpecError(f"points {self.points!r}: all, or a comma list of {', '.join(p.value for p in ORDER)} "
                            f"(a file save) or of {', '.join(p.name for p in DCP_ORDER)} (a DCP save)")


def newest_complete(files: Sequence[str]) -> int | None:
    """The newest complete checkpoint's step among the volume's files (None: not the reference
    trainer's names, or none)."""
    steps = [int(m[1]) for m in map(_CHECKPOINT.match, files) if m]
    return max(steps) if steps else None


@hypothesis("kill-at-save-point", "the node writing a checkpoint killed at each point of its save (after create, "
                                  "mid-write, before fsync, before rename, after rename); every restart resumes "
                                  "from the newest complete checkpoint, never the partial one",
            fault="kill-at-save-point", params=Points, forced={"storage_layer": True})
def kill_at_save_point(t: Trial) -> None:
    """For each of ``--points`` in turn: hold the next save at that point, kill its writer's node
    while held (the op is never done) and let the job recover. Each restart resumes from the
    newest complete checkpoint on the volume at the kill (the interrupted one only once its
    rename was done), loses at most one checkpoint interval, meets no corrupt file, and the
    killed writer's temporary is removed; nothing hangs."""
    dcp = t.job.checkpoint_format is CheckpointFormat.DCP
    points = parse_points(t.params.points, dcp=dcp)
    t.start()
    t.steady()
    for i, point in enumerate(points):
        if isinstance(point, DcpPoint):
            path = f"{oldest_complete(t)}/{point.path}" if point.prunes else point.path
            record = t.inject(t.fault(point=point.point, path=path, after_bytes=point.after_bytes,
                                      hold_s=_in_flight_hold(t, point)))
        else:
            record = t.inject(t.fault(point=point))
        rec = t.recover(record)
        if isinstance(point, DcpPoint):
            _check_dcp_point(t, point, record, rec.resumed_from_step)
        else:
            _check_point(t, record, rec.resumed_from_step)
        t.check_recovered(rec)
        if t.replaces_nodes and i + 1 < len(points):
            t.regrow(record)
    corrupt = t.run.timeline.select(CheckpointEv.CORRUPT)
    t.verdict.require(not corrupt, f"no restart met a corrupt checkpoint ({len(corrupt)} reported)",
                      check="no-corrupt")
    storage = t.run.platform.capability(CheckpointStorage)
    if dcp:
        _check_dcp_tidy(t, storage.direct(), _pruned_at(t, after=record.injected_at))
        return
    left = sorted(p.name for p in storage.direct().iterdir() if p.name.startswith(".ckpt-"))
    if left and t.run.platform.name != "local":
        # a re-created pod has the same host name in a new PID namespace: the trainer cannot tell the
        # old writer is gone, and keeps its temporary until it is ABANDONED_AFTER_S (6 h) old
        t.verdict.skip(f"the killed writers' temporaries stay ({', '.join(left)}): the restarted pods cannot tell "
                       "a writer of another PID namespace is gone, so the reference trainer keeps them for 6 h "
                       "(elastic_chaos/trainer/checkpoint.py ABANDONED_AFTER_S), a checkpoint's size of disk per kill",
                       check="tidy")
        return
    t.verdict.require(not left, "the killed writers' temporaries were removed by the restarts"
                      + (f"; left: {', '.join(left)}" if left else ""), check="tidy")


def _check_point(t: Trial, record: FaultRecord, resumed: int | None) -> None:
    point = str(record.detail.get("point"))
    v = t.verdict
    held = "its return held: the op was done" if point.startswith("after-") else "the op was not done"
    v.require(record.detail.get("op_done") is False,
              f"{point}: {record.target}'s writer (pid {record.detail.get('pid')}) was killed while held at "
              f"{point} of {record.detail.get('path')} ({record.detail.get('held_s')}s held; {held})",
              check="aim")
    files = [str(f) for f in record.detail.get("files") or []]
    newest = newest_complete(files)
    if newest is None and any(not f.startswith("ckpt-") for f in files):
        v.skip(f"{point}: the volume's files are not the reference trainer's ({', '.join(files)}): which one is "
               f"complete is the script's to say; it resumed from {resumed}", check="newest-complete")
        return
    v.require(resumed == (newest or 0), f"{point}: resumed from step {resumed}, the newest complete checkpoint on "
              f"the volume at the kill ({newest or 0}), never the partial one", check="newest-complete")


def expected_dcp_resume(detail: dict[str, Any]) -> tuple[int, int, str]:
    """The steps a restart may resume from after a kill in a DCP save, from the volume the fault saw:
    (lowest, highest, words). Highest: the newest complete folder; lowest: the one ``latest`` named
    when it was complete (a trainer that trusts its pointer resumes there), else the highest."""
    complete = sorted(int(m[1]) for m in map(_FOLDER.match, detail.get("complete") or []) if m)
    newest = complete[-1] if complete else 0
    named = _FOLDER.match(str(detail.get("pointer") or ""))
    pointed = int(named[1]) if named and named[0] in (detail.get("complete") or []) else None
    if pointed is None or pointed == newest:
        return newest, newest, f"the newest complete save ({newest})"
    return pointed, newest, f"the save latest named ({pointed}) or the newest complete one ({newest})"


def oldest_complete(t: Trial) -> str:
    """The folder the reference trainer's next prune removes: the oldest complete one on the volume now
    (``step-*`` where there is none yet: the aim check then says what was held)."""
    complete = folder_saves(t.run.platform.capability(CheckpointStorage).direct()).get("complete") or []
    return min(complete, key=lambda name: int(name.removeprefix("step-")), default="step-*")


IN_FLIGHT_STEPS = 5
"""With --async-save, a shard point holds its writer this many steps' time before the kill: the save is
in flight in the background while training goes on, the case async saves exist for."""


def _in_flight_hold(t: Trial, point: DcpPoint) -> float:
    """Seconds to hold a shard's writer before the kill: the job's async saves train on meanwhile."""
    if not t.job.async_save or point.path != _SHARDS:
        return 0.0
    return max(1.0, IN_FLIGHT_STEPS * t.job.step_time)


def _check_in_flight(t: Trial, point: DcpPoint, record: FaultRecord) -> None:
    """An asynchronous save's shard held: the job trained past the save's step before the kill."""
    folder = _FOLDER.match(str(record.detail.get("path") or "").split("/", 1)[0])
    saving = int(folder[1]) if folder else None
    trained = [e.data.step for e in t.run.timeline.select(ProgressEv.STEP, until=record.injected_at)
               if e.data.step is not None]
    last = max(trained, default=None)
    t.verdict.require(saving is not None and last is not None and last > saving,
                      f"{point.name}: the save of step {saving} was in flight when its writer's node was killed: the "
                      f"job had trained on to step {last} (--async-save)", check="in-flight")


def pointer_sound(name: str, detail: dict[str, Any]) -> tuple[bool, str]:
    """Whether ``latest`` named a complete save (or nothing) at the kill, and the sentence that says so."""
    pointer = detail.get("pointer")
    if pointer is None:
        return True, f"{name}: no latest pointer at the kill"
    if pointer in (detail.get("complete") or []):
        return True, f"{name}: latest named {pointer} at the kill, a complete save"
    return False, (f"{name}: latest named {pointer} at the kill, a save not yet complete (no .metadata): a restart "
                   "that trusts it meets a save that does not load")


def _check_dcp_point(t: Trial, point: DcpPoint, record: FaultRecord, resumed: int | None) -> None:
    v = t.verdict
    v.require(record.detail.get("op_done") is False,
              f"{point.name}: {record.target}'s writer (pid {record.detail.get('pid')}) was killed while held at "
              f"{point.point.value} of {record.detail.get('path')} ({record.detail.get('held_s')}s held): "
              f"{point.leaves}", check="aim")
    v.require(*pointer_sound(point.name, record.detail), check="pointer-sound")
    if _in_flight_hold(t, point):
        _check_in_flight(t, point, record)
    if point.prunes:
        _check_prune(t, point, record)
    low, high, words = expected_dcp_resume(record.detail)
    partial = ", ".join(str(p) for p in record.detail.get("partial") or []) or "none"
    v.require(resumed is not None and low <= resumed <= high,
              f"{point.name}: resumed from step {resumed}, {words} at the kill; never a partial one "
              f"(partial at the kill: {partial})", check="newest-complete")


def _pruned_at(t: Trial, *, after: float) -> int:
    """Wait for a periodic save after the last kill and for the saving node's next step line (the
    reference trainer's coordinator prunes right after it reports the save, before it reports another
    step; an asynchronous save is reported steps after its own); that save's step."""
    saved = t.run.wait_for("a periodic save after the last kill (it prunes)",
                           lambda e: e.type == CheckpointEv.SAVED and e.t > after and e.data.reason == "periodic"
                           and e.data.step is not None, t.opts.timeout_s)
    t.run.wait_for("the pruning node's next step",
                   lambda e: e.type == ProgressEv.STEP and e.node == saved.node and e.t > saved.t, t.opts.timeout_s)
    return int(saved.data.step)


def _check_dcp_tidy(t: Trial, volume: Path, head: int) -> None:
    """Once a save after the last kill pruned (``head``: its step): no partial step folder below it (the
    trainer removes them then) and no temporary of a killed writer beside them."""
    detail = folder_saves(volume)
    below = [p for p in detail.get("partial") or [] if (m := _FOLDER.match(p)) and int(m[1]) < head]
    temps = sorted(p.name for p in volume.iterdir() if p.name.startswith((".latest.tmp.", ".step-")))
    left = below + temps
    if left and t.run.platform.name != "local":
        t.verdict.skip(f"the killed writers' leftovers stay ({', '.join(left)}): the restarted pods cannot tell a "
                       "writer of another PID namespace is gone", check="tidy")
        return
    t.verdict.require(not left, "the killed writers' partial folders and temporaries were removed by the restarts "
                      f"and the prune of the save at step {head}" + (f"; left: {', '.join(left)}" if left else ""),
                      check="tidy")


def _check_prune(t: Trial, point: DcpPoint, record: FaultRecord) -> None:
    """A kill inside a prune: what was held was a prune (a folder below the one ``latest`` named), that
    save was still complete, and no folder looked complete without every rank's shard."""
    detail, v = record.detail, t.verdict
    held = _FOLDER.match(str(detail.get("path") or "").split("/", 1)[0])
    named = _FOLDER.match(str(detail.get("pointer") or ""))
    v.require(held is not None and named is not None and int(held[1]) < int(named[1])
              and named[0] in (detail.get("complete") or []),
              f"{point.name}: the save held was an old one being pruned ({detail.get('path')}), below the one "
              f"latest named ({detail.get('pointer')}), which was complete: nothing the job needed was pruned",
              check="prune")
    hollow = hollow_saves(detail, _worlds(t))
    v.require(not hollow, f"{point.name}: no folder looked complete without every rank's shard at the kill"
              + (f"; {', '.join(hollow)} had .metadata and missing shards (a restart that falls back to it "
                 "meets a save that does not load)" if hollow else ""), check="prune")


def hollow_saves(detail: dict[str, Any], worlds: dict[int, int]) -> list[str]:
    """The folders complete at the kill (their ``.metadata`` there) holding fewer shards than the world
    that saved them had ranks (``worlds``: step -> world size; a step not in it is not judged)."""
    shards = detail.get("shards") or {}
    hollow = []
    for name in detail.get("complete") or []:
        m = _FOLDER.match(name)
        world = worlds.get(int(m[1])) if m else None
        if world is not None and int(shards.get(name, 0)) < world:
            hollow.append(f"{name} ({shards.get(name, 0)} of {world} shards)")
    return hollow


def _worlds(t: Trial) -> dict[int, int]:
    """Step -> the world size that trained it, last heard (a step trained twice: its last training)."""
    return {e.data.step: int(e.data.world_size) for e in t.run.timeline.select(ProgressEv.STEP)
            if e.data.step is not None and e.data.world_size is not None}
