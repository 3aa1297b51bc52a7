"""Every crash point of a save: the node writing a checkpoint killed at an exact point of its save
(the storage layer holds the op, the node is killed while it is held). The restart resumes from the
newest complete checkpoint, never the partial one.

Here one of the five points: before-rename (a complete, fsynced temporary that was never
published: the newest complete checkpoint is the one before). The full grid, every point in two
runs, is bench/storage.py (`make bench`; `python -m bench --storage`), and `elastic-chaos run
kill-at-save-point` runs all five in one job.
"""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE, LOSS_RDZV, STORAGE_PLATFORMS, STORAGE_REASON, require_storage_layer

pytestmark = [pytest.mark.slow, pytest.mark.platforms(*STORAGE_PLATFORMS, reason=STORAGE_REASON)]


def test_a_kill_before_the_rename_resumes_from_the_newest_complete_checkpoint(run_hypothesis, chaos_platform):
    require_storage_layer()
    # no replacement locally: the survivor trains on alone (a StatefulSet re-creates its pod anyway)
    run_hypothesis("kill-at-save-point", points="before-rename", replace_lost_nodes=chaos_platform != "local",
                   **CADENCE, **LOSS_RDZV)
