"""Exactly-once: across a kill, a restore and a resize, every sample of an epoch is
trained once in the committed history — and the check catches a sampler that does not."""
from __future__ import annotations

import pytest
from scenario_settings import CHECKPOINT_EVERY, FAST_RDZV, STEADY

from chaos.faults import KillNode

pytestmark = [pytest.mark.slow, pytest.mark.platforms("local")]


def test_the_elastic_sampler_trains_every_sample_exactly_once_across_a_resize(elastic_job):
    job = elastic_job(nodes="1:2", checkpoint_every=CHECKPOINT_EVERY, replace_lost_nodes=False, **FAST_RDZV)
    job.wait_for_step(STEADY)
    fault = job.inject(KillNode())
    recovery = job.wait_for_recovery(fault, timeout=150)
    job.wait_for_steps(30, timeout=60)

    assert recovery.world_size_after == 1 and recovery.lost_steps > 0   # a real rollback and resize happened
    samples = job.samples
    assert samples.rolled_back_steps > 0
    assert samples.duplicates == [] and samples.gaps == [], samples.summary()


def test_a_naive_distributed_sampler_restart_is_caught(elastic_job):
    job = elastic_job(nodes="1:2", checkpoint_every=CHECKPOINT_EVERY, replace_lost_nodes=False,
                      trainer_args=["--sampler", "naive"], **FAST_RDZV)
    job.wait_for_step(STEADY)
    fault = job.inject(KillNode())
    job.wait_for_recovery(fault, timeout=150)
    job.wait_for_steps(30, timeout=60)

    samples = job.samples                 # restarted at world size 1, it re-derives its place in
    assert samples.duplicates, samples.summary()   # the epoch from the step count: samples twice
