"""Every crash point of a save: the node writing a checkpoint killed at an exact point of its save
(the storage layer holds the op, the node is killed while it is held). The restart resumes from the
newest complete checkpoint, never the partial one.

Here two of the five points, in one run: mid-write (a partial temporary) and before-rename (a
complete, fsynced temporary that was never published). The full grid, every point several times,
is bench/savepoints.py (`make bench`; `python -m bench --storage`).
"""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE, STORAGE_PLATFORMS, STORAGE_REASON, require_storage_layer

pytestmark = [pytest.mark.slow, pytest.mark.platforms(*STORAGE_PLATFORMS, reason=STORAGE_REASON)]


def test_a_kill_mid_write_or_before_the_rename_resumes_from_the_newest_complete_checkpoint(run_hypothesis):
    require_storage_layer()
    run_hypothesis("kill-at-save-point", points="mid-write,before-rename", **CADENCE)

