"""Stale reads from the checkpoint volume: a shared volume's caches that are not revalidated.

- ``stale-read``: from the fault on, every node reads the checkpoint folder through a stale
  cache (elastic_chaos.storagefs.rules.StaleRead): a file another node replaced (renamed over,
  rewritten in place) or removed since reads back its old bytes, a name another node created
  since is not there (ENOENT), and a listing shows the folder as it was. Each node sees its own
  changes. An NFS or EFS client whose attribute, lookup and data caches are not revalidated
  (``nocto``, a long ``actimeo``), or an eventually consistent object store behind a FUSE mount,
  answers like this. ``--target NODE`` makes only that node's caches stale; ``--stale-path``
  narrows it to some paths (``latest``: DCP's pointer alone).

Where it hurts is a resume: a restart on a node whose cache is stale reads an old ``latest``
pointer, or lists the folder without the newest ``ckpt-<step>.pt``, and resumes from an older
save without a word. The toolkit's own reads (no node) always see the volume as it is.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from elastic_chaos.errors import SpecError
from elastic_chaos.events import Timeline
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.api import FaultPlan
from elastic_chaos.faults.storage import _StorageFault, folder_saves
from elastic_chaos.options import DAY_S, option
from elastic_chaos.platforms.api import Platform
from elastic_chaos.platforms.capabilities import CheckpointStorage
from elastic_chaos.storagefs import Rule, StaleRead


def volume_state(volume: Path) -> dict[str, Any]:
    """What the volume holds at this moment, as the record keeps it: its checkpoint files (names not
    starting with a dot) and its folder saves with what ``latest`` names (faults.storage.folder_saves)."""
    files = sorted(p.name for p in volume.iterdir() if p.is_file() and not p.name.startswith("."))
    return {"files": files, **folder_saves(volume)}


@dataclass
class StaleReadFault(_StorageFault):
    """Every node (or ``node``) reads paths matching ``stale_path`` as they were when the fault began."""

    stale_path: str = option("*", "glob of the paths inside the volume whose reads go stale (every path by default; "
                                  "'latest': DCP's pointer alone; 'ckpt-*.pt')", flag="--stale-path", metavar="GLOB")
    duration_s: float | None = option(None, "seconds the caches stay stale, then every node reads the volume as it is "
                                            "(none: until the end of the run)", flag="--duration", above=0,
                                      units="s", maximum=DAY_S)
    name: ClassVar[str] = "stale-read"
    description: ClassVar[str] = ("stale reads from the checkpoint volume (an NFS/EFS client's caches, an eventually "
                                  "consistent object store): a file another node replaced or removed reads as it "
                                  "was, a new one is not there, listings show the old folder; each node sees its "
                                  "own changes")

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            self._rules()   # a bad --stale-path is the user's input: SpecError now, before a run starts
        except SpecError as exc:
            raise SpecError(f"stale-read --stale-path: {exc}") from None

    def rules(self) -> tuple[Rule, ...]:
        return (StaleRead(path=self.stale_path),)

    def plan(self, platform: Platform) -> FaultPlan:
        made = super().plan(platform)
        who = f"{self.node}'s callers" if self.node else "every node's callers (the toolkit's own reads stay fresh)"
        return FaultPlan(made.fault, made.target, (
            f"from now on, {who} read paths matching {self.stale_path!r} of the checkpoint volume as they are now: "
            "a file another node replaces or removes reads as it was, a name another node creates is not there, "
            "listings show the folder as it is now; each node sees its own changes", *made.actions[1:]))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        held = volume_state(platform.capability(CheckpointStorage).direct())
        record = super()._inject(platform, plan, timeline)
        # read just before the rule was set: a save that landed in between is not in it
        return dataclasses.replace(record, detail={**record.detail, "held": held})

    def detail(self) -> dict[str, object]:
        return {"stale_path": self.stale_path}
