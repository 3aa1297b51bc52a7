"""kill-during-checkpoint: a kill that lands while a checkpoint is being written; the restart
must load the newest COMPLETE checkpoint, never the partial one."""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE, LOSS_RDZV

pytestmark = pytest.mark.slow


def test_kill_during_checkpoint_resumes_from_the_previous_complete_one(run_hypothesis, chaos_platform):
    # --save-delay (1 s between the durable temporary file and the rename) stands in
    # for a large model's write: the window the kill aims at.
    # No replacement locally keeps the run short. A Kubernetes controller can be kept from
    # re-creating only its highest-index worker (scaled down), and the writer is rank 0, which
    # the rendezvous gives to whichever pod sorts first: there the lost node is replaced.
    run_hypothesis("kill-during-checkpoint", **CADENCE,
                   replace_lost_nodes=chaos_platform != "local", **LOSS_RDZV)
