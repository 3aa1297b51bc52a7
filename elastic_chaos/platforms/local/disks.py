"""Node-local disks on the local platform: each node works in a folder of its own, lost with it.

A script written for machines with disks of their own (and no shared volume) saves
on every node's local rank 0 to a relative path such as ``snapshot.pt``. Run with
every node's working directory in the one shared workdir, those nodes race on one
file: torch.save from two processes into one path leaves a file neither wrote, and
a restart reads it. With ``JobSpec.node_local_workdir`` each node gets
``node-disks/<node>/`` in the report folder as its working directory, empty at
start, and keeps it while it lives: a worker crash or a restart of its workers
leaves it, as a reboot of a process leaves a disk. A node lost to a fault (a kill,
a spot interruption) loses it, as a terminated machine loses its instance store:
the folder is deleted once the node's processes are dead, and its replacement,
a new node, starts with an empty one of its own. Node names are never reused in
a run, so no node ever finds another's files.

Every node's environment names its folder (``ELASTIC_CHAOS_LOCAL_DIR``) and the
shared workdir (``ELASTIC_CHAOS_SHARED_DIR``: data every node reads), so a script
that wants both can have both.
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from elastic_chaos.events import NodeEv, Timeline
from elastic_chaos.events.node_events import DiskLost
from elastic_chaos.spec import LOCAL_DIR_VAR, SHARED_DIR_VAR

FOLDER = "node-disks"
"""The folder in the report folder that holds every node's disk, one subfolder per node."""
LISTED = 12


@dataclass(frozen=True)
class LostDisk:
    """What a lost node's disk held when it went."""

    path: Path
    files: tuple[str, ...]
    """Its files, relative to it (the first few)."""
    count: int
    size: int
    """Bytes."""


class NodeDisks:
    """The node-local folders of one job, under ``root`` (``<report>/node-disks``); a disk
    lost with its node is said on ``timeline`` (``node/disk_lost``)."""

    def __init__(self, root: Path, timeline: Timeline) -> None:
        self.root = root
        self.timeline = timeline

    def path(self, node: str) -> Path:
        return self.root / node

    def create(self, node: str) -> Path:
        """The empty folder ``node`` starts with (made now). Raises OSError when it cannot be made."""
        path = self.path(node)
        if path.exists():  # a name is never reused in a run: whatever is there is not this node's
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return path

    def env(self, node: str, shared: Path) -> dict[str, str]:
        """The variables that tell ``node``'s processes where their disk and the shared workdir are."""
        return {LOCAL_DIR_VAR: str(self.path(node)), SHARED_DIR_VAR: str(shared)}

    def lose(self, node: str) -> LostDisk:
        """Delete ``node``'s folder (its processes must be dead), and say on the timeline what
        it held. A folder already gone held nothing."""
        path = self.path(node)
        files, size = [], 0
        for root, _, names in os.walk(path):
            for name in names:
                p = Path(root) / name
                files.append(str(p.relative_to(path)))
                try:
                    size += p.stat().st_size
                except OSError:
                    pass
        shutil.rmtree(path, ignore_errors=True)
        if path.exists():  # something held on: empty it at least
            for child in path.iterdir():
                if child.is_dir():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
        lost = LostDisk(path, tuple(sorted(files)[:LISTED]), len(files), size)
        self.timeline.emit(NodeEv.DISK_LOST, node, DiskLost(path=str(path), files=lost.files, count=lost.count,
                                                            size=lost.size), t=time.time())
        return lost

    def live(self) -> dict[str, Path]:
        """Node -> its folder, for every node whose disk exists now."""
        try:
            return {p.name: p for p in sorted(self.root.iterdir()) if p.is_dir()}
        except OSError:
            return {}
