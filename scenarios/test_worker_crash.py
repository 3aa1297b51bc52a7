"""worker-crash: one worker process dies (OOM, segfault, a bad batch); its node stays and
restarts the worker group at the same size, spending one restart of its budget."""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE, FAST_RDZV

pytestmark = pytest.mark.slow


def test_worker_crash_restarts_the_group_at_the_same_size(run_hypothesis):
    run_hypothesis("worker-crash", **CADENCE, max_restarts=3, **FAST_RDZV)


def test_restarts_exhausted_fails_the_job_and_says_the_budget_ran_out(run_hypothesis):
    from elastic_chaos.analysis.outcome import FailureCause
    run = run_hypothesis("restarts-exhausted", **CADENCE, max_restarts=1,
                         expect_failed={"job-survives"}, **FAST_RDZV)
    outcome = run.outcome()
    assert outcome.failed and FailureCause.RESTARTS_EXHAUSTED in outcome.causes, outcome.reasons
