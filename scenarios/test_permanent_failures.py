"""Faults a job does not survive, and a verdict that says why."""
from __future__ import annotations

import pytest
from scenario_settings import CHECKPOINT_EVERY, STEADY

from chaos.faults import StoreHostLoss, WorkerCrash

pytestmark = [pytest.mark.slow, pytest.mark.platforms("local")]


def test_losing_the_c10d_store_host_kills_the_job_for_good(elastic_job):
    # c10d keeps the rendezvous in a TCPStore on one node (worker-0 of a
    # PyTorchJob): a single point of failure that etcd-v2 does not have.
    job = elastic_job(nodes="1:3", checkpoint_every=CHECKPOINT_EVERY, rdzv_backend="c10d",
                      replace_lost_nodes=False)
    job.wait_for_step(STEADY)

    fault = job.inject(StoreHostLoss())
    outcome = job.wait_for_job_end(timeout=180)

    assert fault.target == "node-0"
    assert outcome.failed
    assert any("could not rendezvous" in r for r in outcome.reasons), outcome.reasons
    assert job.recovery(fault).recovered is False


def test_more_crashes_than_max_restarts_fail_the_job_and_say_so(elastic_job):
    job = elastic_job(nodes="1:2", checkpoint_every=CHECKPOINT_EVERY, max_restarts=1, last_call_timeout=3)
    job.wait_for_step(STEADY)

    first = job.inject(WorkerCrash(node="node-1"))
    job.wait_for_recovery(first, timeout=150)
    job.inject(WorkerCrash(node="node-1"))
    outcome = job.wait_for_job_end(timeout=180)

    assert outcome.failed
    assert any("exhausted its restart budget" in r and "max_restarts=1" in r for r in outcome.reasons), outcome.reasons
