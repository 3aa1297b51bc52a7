"""Link faults on real jobs beside the catalog's (scenarios/test_network_links.py: 5 % loss): a 1 Mbit/s
cap and 20 ms of delay each way slow steps without a restart, and a link that flaps 3 s down / 4 s up,
well inside the collective timeout, stalls the job and nothing fails; a delay set apart per direction
(20 ms out, 5 ms back) is measured each way, and a 5 % loss in bursts of 4 packets is survived, its bursts
counted by its queue readers; each measured across the link, nothing left behind."""
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



def test_a_link_delayed_each_way_its_own_is_measured_each_way_without_a_restart(run_hypothesis):
    run = run_hypothesis("latency", delay_ms=20.0, reverse_delay_ms=5.0, between=("node-0", "node-1"),
                         duration_s=10.0, steady_steps=STEADY_STEPS)
    cost = cost_of(run)
    assert cost.reverse_delay_ms == 5.0 and cost.restarts == 0
    ways = (cost.one_way_ms, cost.one_way_baseline_ms, cost.one_way_back_ms, cost.one_way_back_baseline_ms)
    assert None not in ways, cost.describe()
    out, back = ways[0] - ways[1], ways[2] - ways[3]
    assert 17 <= out <= 30 and 3 <= back <= 12, cost.describe()
    assert "one way" in cost.describe() and "5.0 ms back asked" in cost.describe()


def test_a_bursty_loss_is_survived_and_its_bursts_are_counted(run_hypothesis):
    run = run_hypothesis("packet-loss", rate=0.05, burst=4.0, between=("node-0", "node-1"), duration_s=10.0,
                         steady_steps=STEADY_STEPS)
    cost = cost_of(run)
    assert cost.loss_measured is not None and cost.restarts == 0 and cost.burst_asked == 4.0
    # the readers' own count over every packet of the link for the whole fault: the reference trainer's
    # ~2,000 packets in 10 s, some 40 bursts, so about 3.5 sigma either way; independent loss would have
    # runs of 1.05 packets on average
    assert cost.loss_dropped is not None and 0.01 <= cost.loss_dropped <= 0.10, cost.describe()
    assert cost.burst_dropped is not None and 2.0 <= cost.burst_dropped <= 6.5, cost.describe()
