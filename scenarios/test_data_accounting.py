"""Exactly-once: across a kill, a restore and a resize, every sample of an epoch is
trained once in the committed history, and the check catches a sampler that does not.
Every hypothesis checks it when the job reports its samples; the kill-node scenario
(scenarios/test_kill_node.py, its shrink) trains on past the rollback and asserts the
check ran and held. Here the check must fail: the same kill, with a sampler that does
not resume where the committed history ended."""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE, LOSS_RDZV

pytestmark = pytest.mark.slow


def test_a_naive_distributed_sampler_restart_is_caught(run_hypothesis):
    # restarted at world size 1, it re-derives its place in the epoch from the step count: samples twice
    run = run_hypothesis("kill-node", **CADENCE, replace_lost_nodes=False, extra_steps=30,
                         trainer_args=["--sampler", "naive"], expect_failed={"exactly-once"}, **LOSS_RDZV)
    assert run.samples.duplicates, run.samples.summary()
