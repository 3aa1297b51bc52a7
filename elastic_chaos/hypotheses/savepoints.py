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
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from elastic_chaos.errors import SpecError
from elastic_chaos.events import CheckpointEv
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.hypotheses.api import Trial, hypothesis
from elastic_chaos.options import option, validate
from elastic_chaos.platforms.capabilities import CheckpointStorage
from elastic_chaos.storagefs import SavePoint

ORDER = tuple(SavePoint)
"""The points in the order a save reaches them."""
_CHECKPOINT = re.compile(r"^ckpt-(\d{8,})\.pt$")
"""The reference trainer's complete checkpoints (elastic_chaos/trainer/checkpoint.py)."""


def parse_points(text: str) -> tuple[SavePoint, ...]:
    """``all`` or a comma list of point names, in the order given; SpecError naming them."""
    if text.strip() == "all":
        return ORDER
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = {p.value: p for p in SavePoint}
    bad = [n for n in names if n not in known]
    if not names or bad:
        raise SpecError(f"points {text!r}: all, or a comma list of {', '.join(known)}")
    return tuple(known[n] for n in names)


@dataclass(frozen=True)
class Points:
    points: str = option("all", "the points of the save to kill the writer at, one kill each in this order: all, "
                                "or a comma list of " + ", ".join(p.value for p in ORDER), metavar="POINTS")

    def __post_init__(self) -> None:
        validate(self)
        parse_points(self.points)


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
    points = parse_points(t.params.points)
    t.start()
    t.steady()
    for i, point in enumerate(points):
        record = t.inject(t.fault(point=point))
        rec = t.recover(record)
        _check_point(t, record, rec.resumed_from_step)
        t.check_recovered(rec)
        if t.replaces_nodes and i + 1 < len(points):
            t.regrow(record)
    corrupt = t.run.timeline.select(CheckpointEv.CORRUPT)
    t.verdict.require(not corrupt, f"no restart met a corrupt checkpoint ({len(corrupt)} reported)",
                      check="no-corrupt")
    storage = t.run.platform.capability(CheckpointStorage)
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
