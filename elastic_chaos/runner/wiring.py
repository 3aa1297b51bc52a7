"""Which watchers a job gets, and with what: the timeline's feeds for one run.

Every job's node logs (the log follower, reading a script's own lines through ScriptLines), the
disk under the report folder and the job's working folder; a script's checkpoint path (in the
shared working folder, past the storage layer's mount when there is one, or on every node's own
disk with ``node_local_workdir``); the storage layer's op log; the rendezvous in etcd. The
checkpoint watcher labels a save with the step the logs show completed before it, so it reads
the follower's progress (``read_until``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from elastic_chaos.events import Timeline
from elastic_chaos.platforms.api import Platform
from elastic_chaos.platforms.storage import storage_of
from elastic_chaos.runner import disk
from elastic_chaos.spec import JobSpec
from elastic_chaos.watchers.api import Watcher
from elastic_chaos.watchers.checkpoints import CheckpointWatcher, NodeRoots
from elastic_chaos.watchers.logs import LogFollower
from elastic_chaos.watchers.rendezvous import RendezvousWatcher
from elastic_chaos.watchers.script_lines import ScriptLines
from elastic_chaos.watchers.storage import StorageOpWatcher


@dataclass
class JobWatchers:
    """The watchers of one job, in the order they start (``all``)."""

    script_lines: ScriptLines
    follower: LogFollower
    disk: disk.DiskWatch
    checkpoint: CheckpointWatcher | None = None
    """The watcher of a script's own checkpoint path (--checkpoint), when there is one."""
    node_roots: NodeRoots | None = None
    """Where that path is watched on each node's own disk (node_local_workdir)."""
    others: list[Watcher] = field(default_factory=list)

    def all(self) -> list[Watcher]:
        return [self.follower, *([self.checkpoint] if self.checkpoint is not None else []), self.disk, *self.others]


def job_watchers(platform: Platform, timeline: Timeline, job: JobSpec, workdir: Path | None,
                 report_dir: Path) -> JobWatchers:
    """The watchers ``job`` needs on ``platform`` (not started)."""
    script_lines = ScriptLines(job.observe, job.nproc_per_node)
    follower = LogFollower(timeline, platform.node_logs, script_lines, tz=platform.node_log_timezone(),
                           worker_logs=platform.worker_logs)
    storage = storage_of(platform)  # the checkpoint folder behind the storage layer: read it past the mount
    view = storage.view if storage is not None else None
    ckpt, read = job.observe.checkpoint, (lambda: follower.read_until)
    checkpoint, node_roots = None, None
    if ckpt and job.node_local_workdir and not Path(ckpt).is_absolute():  # on every node's own disk
        node_roots = NodeRoots(platform.node_workdirs, ckpt)
        checkpoint = CheckpointWatcher(timeline, node_roots, read_until=read)
    elif ckpt and workdir is not None:  # a script's own checkpoint file
        checkpoint = CheckpointWatcher(timeline, workdir / ckpt, read_until=read, view=view)
    watching = JobWatchers(script_lines, follower,
                           disk.DiskWatch(timeline, lambda: [p for p in (report_dir, workdir) if p]),
                           checkpoint, node_roots)
    if storage is not None:
        watching.others.append(StorageOpWatcher(timeline, storage.op_log(), mountpoint=storage.mountpoint()))
    endpoint = platform.etcd_endpoint()
    if endpoint:
        watching.others.append(RendezvousWatcher(timeline, endpoint, job.run_id, partial(pid_to_node, platform)))
    return watching


def pid_to_node(platform: Platform) -> dict[int | str, str]:
    """Rendezvous participants -> node names: by agent PID and by address, each only
    where it is unambiguous (local nodes share "localhost"; pods share PID 1)."""
    keys: dict[int | str, list[str]] = {}
    for n in platform.nodes():
        for key in (n.agent_pid, n.labels.get("address"), n.name):
            if key:
                keys.setdefault(key, []).append(n.name)
    return {k: v[0] for k, v in keys.items() if len(set(v)) == 1}
