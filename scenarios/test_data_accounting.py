"""Exactly-once: across a kill, a restore and a resize, every sample of an epoch is
trained once in the committed history — and the check catches a sampler that does not.
(Every hypothesis checks it when the job reports its samples; here it is the point.)"""
from __future__ import annotations

import pytest
from scenario_settings import CHECKPOINT_EVERY, FAST_RDZV

pytestmark = pytest.mark.slow


def test_the_elastic_sampler_trains_every_sample_exactly_once_across_a_resize(run_hypothesis):
    run = run_hypothesis("kill-node", checkpoint_every=CHECKPOINT_EVERY, replace_lost_nodes=False, extra_steps=30,
                         **FAST_RDZV)
    assert run.recoveries()[0].lost_steps > 0 and run.samples.rolled_back_steps > 0   # a real rollback happened
    assert "exactly-once" in {c.name for c in run.verdict.checks}


def test_a_naive_distributed_sampler_restart_is_caught(run_hypothesis):
    # restarted at world size 1, it re-derives its place in the epoch from the step count: samples twice
    run = run_hypothesis("kill-node", checkpoint_every=CHECKPOINT_EVERY, replace_lost_nodes=False, extra_steps=30,
                         trainer_args=["--sampler", "naive"], expect_failed={"exactly-once"}, **FAST_RDZV)
    assert run.samples.duplicates, run.samples.summary()
