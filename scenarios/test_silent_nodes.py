"""partition and freeze: nodes that go silent instead of dying. Peers get no reset and must
find out by timeouts, as after a real instance loss, a NIC failure or a hung host."""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE, FAST_RDZV

pytestmark = pytest.mark.slow

PG_TIMEOUT = 10.0


def test_partition_is_detected_by_timeouts_not_resets(run_hypothesis):
    run_hypothesis("partition", **CADENCE, replace_lost_nodes=False,
                   pg_timeout_s=PG_TIMEOUT, **FAST_RDZV)


def test_freeze_is_detected_by_timeouts_and_the_job_shrinks(run_hypothesis):
    run_hypothesis("freeze", **CADENCE, replace_lost_nodes=False,
                   pg_timeout_s=PG_TIMEOUT, **FAST_RDZV)


def test_a_freeze_that_thaws_before_the_collective_timeout_is_a_stall(run_hypothesis):
    """Frozen 6 s, collective timeout 15 s: the survivors wait, the node thaws, the same
    workers train on at the same world size. The run concludes at once, 0 steps lost."""
    run = run_hypothesis("freeze", **CADENCE, replace_lost_nodes=False,
                         pg_timeout_s=15.0, duration_s=6.0)
    (rec,) = run.recoveries()
    assert rec.lost_steps == 0 and rec.restarts_used == 0 and rec.world_size_after == rec.world_size_before
    assert rec.phases["stall"] is not None and 5.0 <= rec.phases["stall"] < 15.0


def test_a_partition_that_heals_before_the_collective_timeout_is_a_stall(run_hypothesis):
    run = run_hypothesis("partition", **CADENCE, replace_lost_nodes=False,
                         pg_timeout_s=15.0, duration_s=6.0)
    (rec,) = run.recoveries()
    assert rec.lost_steps == 0 and rec.restarts_used == 0
