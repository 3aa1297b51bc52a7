"""One worker process dies (OOM, segfault, a bad batch); its node stays."""
from __future__ import annotations

import pytest
from scenario_settings import CHECKPOINT_EVERY, FAST_RDZV, STEADY

from chaos.faults import WorkerCrash

pytestmark = [pytest.mark.slow, pytest.mark.platforms("local", "kind", "kubernetes")]


def test_a_worker_crash_restarts_the_group_at_the_same_size(elastic_job):
    job = elastic_job(nodes="1:2", checkpoint_every=CHECKPOINT_EVERY, max_restarts=3, **FAST_RDZV)
    job.wait_for_step(STEADY)

    fault = job.inject(WorkerCrash())
    recovery = job.wait_for_recovery(fault, timeout=150)

    assert recovery.world_size_after == recovery.world_size_before == 2
    assert recovery.restarts_used == 1 and recovery.restart_budget == 3
    assert recovery.lost_steps <= CHECKPOINT_EVERY
