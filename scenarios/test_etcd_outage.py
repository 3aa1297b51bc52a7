"""etcd-outage: the rendezvous store (etcd) goes away and comes back with its data.

What torch 2.13 does, measured here: each agent's monitor loop reads the
rendezvous state from etcd every monitor interval, so a *crashed* etcd
(connections refused) makes every agent raise RendezvousConnectionError and
exit, even while training is steady. A *hung* etcd (connections accepted, no
answer) is waited out. The etcd of an etcd-v2 job must be highly available.
"""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE, FAST_RDZV

pytestmark = pytest.mark.slow


def test_a_crashed_etcd_takes_down_even_a_steadily_training_job(run_hypothesis):
    from elastic_chaos.analysis.outcome import FailureCause
    run = run_hypothesis("etcd-outage", **CADENCE, replace_lost_nodes=False,
                         duration_s=8.0, how="crash", expect_failed={"job-survives"}, **FAST_RDZV)
    outcome = run.outcome()
    assert outcome.failed and outcome.causes == {FailureCause.RENDEZVOUS_FAILED}, outcome.reasons


def test_steady_training_rides_out_a_hung_etcd(run_hypothesis):
    run_hypothesis("etcd-outage", **CADENCE, duration_s=8.0, how="hang", **FAST_RDZV)


def test_a_hung_etcd_during_re_rendezvous_delays_but_does_not_break_recovery(run_hypothesis):
    run_hypothesis("etcd-outage", **CADENCE, replace_lost_nodes=False, duration_s=8.0,
                   how="hang", during_rendezvous=True, **FAST_RDZV)
