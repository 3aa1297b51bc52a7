"""partition and freeze: nodes that go silent instead of dying. Peers get no reset and must
find out by timeouts, as after a real instance loss, a NIC failure or a hung host."""
from __future__ import annotations

import pytest
from scenario_settings import CHECKPOINT_EVERY, FAST_RDZV

pytestmark = pytest.mark.slow

PG_TIMEOUT = 10.0


def test_partition_is_detected_by_timeouts_not_resets(run_hypothesis):
    run_hypothesis("partition", checkpoint_every=CHECKPOINT_EVERY, replace_lost_nodes=False,
                   pg_timeout_s=PG_TIMEOUT, **FAST_RDZV)


def test_freeze_is_detected_by_timeouts_and_the_job_shrinks(run_hypothesis):
    run_hypothesis("freeze", checkpoint_every=CHECKPOINT_EVERY, replace_lost_nodes=False,
                   pg_timeout_s=PG_TIMEOUT, **FAST_RDZV)
