"""Capacity comes back: a node joins and the world grows, free of the restart budget."""
from __future__ import annotations

import pytest
from scenario_settings import CHECKPOINT_EVERY, FAST_RDZV, STEADY

from chaos.faults import ScaleUp

pytestmark = [pytest.mark.slow, pytest.mark.platforms("local", "kind", "kubernetes")]


def test_a_joining_node_grows_the_world_without_spending_restarts(elastic_job):
    job = elastic_job(nodes="1:2", start_nodes=1, checkpoint_every=CHECKPOINT_EVERY, max_restarts=1, **FAST_RDZV)
    job.wait_for_step(STEADY)

    fault = job.inject(ScaleUp())
    recovery = job.wait_for_world_size(fault, 2, timeout=150)

    assert recovery.world_size_before == 1 and recovery.world_size_final == 2
    assert recovery.restarts_used == 0                      # a membership change is not a failure
    assert recovery.lost_steps <= CHECKPOINT_EVERY
