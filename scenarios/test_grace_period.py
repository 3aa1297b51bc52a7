"""The grace period of a spot interruption (notice, SIGTERM, SIGKILL after the grace period) when it
lands during a save on a slow checkpoint volume: the interrupted node finishes the save it was in,
trains one more step and saves again, all inside its grace period. It is also the catalog's
slow-storage scenario: the volume is slowed by a slow-storage fault first, and saves get slower.

One cell of the grid phase x storage condition (before the first step, steady, during a save,
during a re-rendezvous; fast or slow volume); the whole grid is bench/storage.py (`make bench`;
`python -m bench --storage`). `elastic-chaos run grace-period --platform kubernetes` runs it on the
local cluster; kept out of the cluster catalog for time.
"""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE, LOSS_RDZV, require_storage_layer

from elastic_chaos.analysis.storage import STORAGE

pytestmark = [pytest.mark.slow, pytest.mark.platforms(
    "local", reason="kept out of the cluster catalog for its time budget; `elastic-chaos run grace-period "
                    "--platform kubernetes` runs it there")]


def test_an_interruption_during_a_save_on_a_slow_volume_saves_within_its_grace_period(run_hypothesis):
    require_storage_layer()
    run = run_hypothesis("grace-period", phase="during-save", save_latency_s=0.3, grace_s=20.0,
                         replace_lost_nodes=False, **CADENCE, **LOSS_RDZV)
    slow, spot = (f.group(STORAGE) for f in run.result().faults)   # the slow-storage fault, then the interruption
    assert slow is not None and slow.save_p50_s is not None and slow.save_before_s is not None
    assert slow.save_p50_s > slow.save_before_s                 # the volume was slow: saves took longer
    assert spot is not None and spot.saved_in_time and (spot.grace_left_s or 0) > 0
