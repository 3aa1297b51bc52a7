"""Nodes that go silent instead of dying: peers get no reset and must find out by
timeouts, as after a real instance loss, a NIC failure or a hung host."""
from __future__ import annotations

import pytest
from scenario_settings import CHECKPOINT_EVERY, FAST_RDZV, STEADY

from chaos.faults import Freeze, Partition

pytestmark = [pytest.mark.slow, pytest.mark.platforms("local")]

PG_TIMEOUT = 10.0


def collective_failures(job, fault):
    return sorted({e.data.get("cause") for e in job.timeline.events()
                   if e.source == "progress" and e.kind == "worker_error"
                   and e.t > fault.injected_at and e.node != fault.target})


@pytest.mark.needs_root
def test_a_partitioned_node_is_detected_by_timeouts_not_resets(elastic_job):
    job = elastic_job(nodes="1:2", checkpoint_every=CHECKPOINT_EVERY, replace_lost_nodes=False,
                      network="isolated", trainer_args=["--pg-timeout", str(PG_TIMEOUT)], **FAST_RDZV)
    job.wait_for_step(STEADY)

    fault = job.inject(Partition())
    recovery = job.wait_for_recovery(fault, timeout=150)

    assert collective_failures(job, fault) == ["timeout"]        # silence, never a closed connection
    assert recovery.detect_s >= 0.5 * PG_TIMEOUT                   # found out by a timeout
    assert recovery.world_size_after == 1
    assert recovery.lost_steps <= CHECKPOINT_EVERY


def test_a_frozen_node_is_detected_by_timeouts_and_the_job_shrinks(elastic_job):
    job = elastic_job(nodes="1:2", checkpoint_every=CHECKPOINT_EVERY, replace_lost_nodes=False,
                      trainer_args=["--pg-timeout", str(PG_TIMEOUT)], **FAST_RDZV)
    job.wait_for_step(STEADY)

    fault = job.inject(Freeze())
    recovery = job.wait_for_recovery(fault, timeout=150)

    assert collective_failures(job, fault) == ["timeout"]
    assert recovery.detect_s >= 0.5 * PG_TIMEOUT
    assert recovery.world_size_after == 1
    assert recovery.lost_steps <= CHECKPOINT_EVERY
