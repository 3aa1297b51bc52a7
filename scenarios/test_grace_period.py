"""The grace period of a spot interruption (notice, SIGTERM, SIGKILL after the grace period) when it
lands during a save on a slow checkpoint volume: the interrupted node finishes the save it was in,
trains one more step and saves again, all inside its grace period.

One cell of the grid phase x storage condition (before the first step, steady, during a save,
during a re-rendezvous; fast or slow volume); the whole grid is bench/grace.py (`make bench`;
`python -m bench --storage`).
"""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE, STORAGE_PLATFORMS, STORAGE_REASON, require_storage_layer

pytestmark = [pytest.mark.slow, pytest.mark.platforms(*STORAGE_PLATFORMS, reason=STORAGE_REASON)]


def test_an_interruption_during_a_save_on_a_slow_volume_saves_within_its_grace_period(run_hypothesis):
    require_storage_layer()
    run_hypothesis("grace-period", phase="during-save", save_latency_s=0.3, grace_s=20.0, **CADENCE)
