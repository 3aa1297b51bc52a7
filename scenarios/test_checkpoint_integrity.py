"""A kill that lands while a checkpoint is being written: the restart must load the
newest COMPLETE checkpoint, never the partial one."""
from __future__ import annotations

import pytest
from scenario_settings import CHECKPOINT_EVERY, FAST_RDZV, STEADY

from chaos.faults import KillDuringCheckpoint
from chaos.faults.triggers import checkpoint_started

pytestmark = [pytest.mark.slow, pytest.mark.platforms("local")]


def test_a_kill_during_a_checkpoint_write_resumes_from_the_previous_complete_one(elastic_job):
    # --save-delay stands in for a large model's write: 1 s between the durable
    # temporary file and the rename, the window the kill aims at.
    job = elastic_job(nodes="1:2", checkpoint_every=CHECKPOINT_EVERY, replace_lost_nodes=False,
                      trainer_args=["--save-delay", "1.0"], **FAST_RDZV)
    job.wait_for_step(STEADY)

    armed = job.arm(KillDuringCheckpoint(), checkpoint_started(min_step=STEADY))
    fault = armed.wait(timeout=60)
    recovery = job.wait_for_recovery(fault, timeout=150)

    interrupted = fault.detail["checkpoint_step"]
    assert fault.detail["during_write"] is True
    assert recovery.resumed_from_step == interrupted - CHECKPOINT_EVERY   # the newest complete one
    corrupt = [e for e in job.timeline.events() if e.source == "checkpoint" and e.kind == "corrupt"]
    assert corrupt == []
    leftovers = list((job.report_dir / "checkpoints").glob(f".ckpt-{interrupted:08d}.pt.tmp.*"))
    assert leftovers, "the interrupted write should have left only its temporary file"
