"""Link faults on real jobs beside the catalog's (scenarios/test_network_links.py: 5 % loss): a 1 Mbit/s
cap and 20 ms of delay each way slow steps without a restart, and a link that flaps 3 s down / 4 s up,
well inside the collective timeout, stalls the job and nothing fails; each measured across the link,
nothing left behind."""
from __future__ import annotations

import pytest
from link_jobs import STEADY_STEPS, cost_of

pytestmark = pytest.mark.slow


def test_a_capped_link_slows_steps_without_a_restart(run_hypothesis):
    run = run_hypothesis("bandwidth", mbit=1.0, between=("node-0", "node-1"), duration_s=10.0,
                         steady_steps=STEADY_STEPS)
    cost = cost_of(run)
    assert cost.mbit_measured is not None and cost.mbit_measured <= 1.5 and cost.restarts == 0


def test_a_delayed_link_slows_steps_without_a_restart(run_hypothesis):
    run = run_hypothesis("latency", delay_ms=20.0, between=("node-0", "node-1"), duration_s=10.0,
                         steady_steps=STEADY_STEPS)
    cost = cost_of(run)
    assert cost.rtt_ms is not None and cost.rtt_ms >= 35 and cost.restarts == 0
    # the timeouts are ordered for the backend the workers used (the trainer's `auto` resolved: gloo here)
    ordered = next(c for c in run.verdict.checks if c.name == "timeouts-ordered")
    assert "(gloo, as its workers said)" in ordered.reason, ordered.reason


def test_a_link_flapping_inside_the_collective_timeout_is_a_stall(run_hypothesis):
    run = run_hypothesis("flapping-link", down_s=3.0, up_s=4.0, duration_s=12.0,
                         steady_steps=STEADY_STEPS)
    cost = cost_of(run)
    assert cost.flaps is not None and cost.flaps >= 2 and cost.restarts == 0

