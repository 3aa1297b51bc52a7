"""Whether the job is steady before its fault: the run's side of elastic_chaos.analysis.steady.

The analysis judges the timeline; the run first gives the evidence a moment to arrive: the log
lines written with the step it reached (a failure beside it, READ_PAST_S at most) and, where the
check needs a save by now, the checkpoint watcher's report of one (SAVE_CATCH_UP_S at most: it
reports a save once the file held still for a poll and the logs were read past it).
"""
from __future__ import annotations

from pathlib import Path

from elastic_chaos.analysis.observation import listing
from elastic_chaos.analysis.steady import Unsteady, unsteady
from elastic_chaos.events import CheckpointEv, Event, Timeline
from elastic_chaos.spec import JobSpec
from elastic_chaos.watchers.checkpoints import CheckpointWatcher

SAVE_CATCH_UP_S = 3.0
"""How long the steady-state check waits for a save the checkpoint watcher has yet to report."""

READ_PAST_S = 1.0
"""How long the steady check waits for the log followers to read past the step it reached."""
LINE_SLACK_S = 0.1
"""Lines written this soon after the step (a failure beside it) are read before the check."""


def steady_problems(timeline: Timeline, job: JobSpec, reached: Event, workdir: Path | None,
                    ckpt_watcher: CheckpointWatcher | None, *,
                    checkpoint_bound: bool = True) -> tuple[list[Unsteady], str | None]:
    """What keeps the job from being steady at ``reached`` (none: steady), and why the check waited
    (None: it did not)."""
    sees_saves = not job.script or job.observe.checkpoint is not None or bool(timeline.select(CheckpointEv.SAVED))
    why = None
    if checkpoint_bound and sees_saves and reached.data.step >= 2 * job.checkpoint_every \
            and not timeline.select(CheckpointEv.SAVED):
        # the check below needs a save by now; the checkpoint file's watcher reports one once it held
        # still for a poll and the logs were read past it: give it that long before calling the job unsteady
        why = "the steady check needs a save by now and the checkpoint watcher had yet to report one"
        timeline.wait_for(lambda e: e.type == CheckpointEv.SAVED, timeout=SAVE_CATCH_UP_S)
    ckpt = job.observe.checkpoint
    folder = (workdir / ckpt).parent if ckpt and workdir is not None and not job.node_local_workdir else None
    problems = unsteady(timeline.events(), world_size=job.initial_nodes * job.nproc_per_node,
                        checkpoint_every=job.checkpoint_every if checkpoint_bound else None,
                        sees_saves=sees_saves, watched=ckpt,
                        workdir_holds=listing(folder) if folder is not None else (),
                        unsettled=ckpt_watcher.unsettled if ckpt_watcher is not None else 0,
                        poll_s=CheckpointWatcher.interval_s)
    return problems, why
