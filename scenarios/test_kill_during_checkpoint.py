"""kill-during-checkpoint: a kill that lands while a checkpoint is being written; the restart
must load the newest COMPLETE checkpoint, never the partial one."""
from __future__ import annotations

import pytest
from scenario_settings import CHECKPOINT_EVERY, FAST_RDZV

pytestmark = pytest.mark.slow


def test_kill_during_checkpoint_resumes_from_the_previous_complete_one(run_hypothesis):
    # --save-delay (1 s between the durable temporary file and the rename) stands in
    # for a large model's write: the window the kill aims at
    run_hypothesis("kill-during-checkpoint", checkpoint_every=CHECKPOINT_EVERY, replace_lost_nodes=False,
                   **FAST_RDZV)
