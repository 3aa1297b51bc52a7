"""straggler: one node at half speed for 10 s. A synchronous job steps at its slowest rank's pace:
its step rate halves (within 20%), the job's per-rank times name the slowed node's rank, nothing
fails, and the rate comes back when the node does."""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE

from elastic_chaos.analysis.throughput import THROUGHPUT

pytestmark = pytest.mark.slow


def test_a_node_at_half_speed_halves_a_synchronous_jobs_step_rate(run_hypothesis):
    run = run_hypothesis("straggler", factor=2.0, duration_s=10.0, steady_steps=CADENCE["steady_steps"])
    rates = run.result().faults[0].group(THROUGHPUT)
    assert rates is not None and rates.slow_node == run.faults[0].target
