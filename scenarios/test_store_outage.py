"""The rendezvous store (etcd) goes away and comes back with its data.

What torch 2.13 does, measured here: each agent's monitor loop reads the
rendezvous state from etcd every monitor interval, so a *crashed* etcd
(connections refused) makes every agent raise RendezvousConnectionError and
exit, even while training is steady. A *hung* etcd (connections accepted, no
answer) is waited out. The etcd of an etcd-v2 job must be highly available.
"""
from __future__ import annotations

import pytest
from scenario_settings import CHECKPOINT_EVERY, FAST_RDZV, STEADY

from chaos.faults import EtcdOutage, KillNode
from chaos.faults.triggers import during_rendezvous
from chaos.platforms.api import StoreOutage

pytestmark = [pytest.mark.slow, pytest.mark.platforms("local")]


def test_a_crashed_etcd_takes_down_even_a_steadily_training_job(elastic_job):
    job = elastic_job(nodes="1:2", checkpoint_every=CHECKPOINT_EVERY, replace_lost_nodes=False, **FAST_RDZV)
    job.wait_for_step(STEADY)

    job.inject(EtcdOutage(duration_s=8.0, how=StoreOutage.CRASH))
    outcome = job.wait_for_job_end(timeout=60)

    assert outcome.failed
    assert all("could not rendezvous" in r and "etcd" in r for r in outcome.reasons), outcome.reasons


def test_steady_training_rides_out_a_hung_etcd(elastic_job):
    job = elastic_job(nodes="1:2", checkpoint_every=CHECKPOINT_EVERY, **FAST_RDZV)
    job.wait_for_step(STEADY)

    outage = job.inject(EtcdOutage(duration_s=8.0, how=StoreOutage.HANG))
    job.wait_for_steps(120, timeout=120)                   # trains through and past the outage

    assert job.recovery(outage).restarts_used == 0
    assert ("fault", "reverted") in [(e.source, e.kind) for e in job.timeline.events()]


def test_a_hung_etcd_during_re_rendezvous_delays_but_does_not_break_recovery(elastic_job):
    job = elastic_job(nodes="1:2", checkpoint_every=CHECKPOINT_EVERY, replace_lost_nodes=False, **FAST_RDZV)
    job.wait_for_step(STEADY)

    armed = job.arm(EtcdOutage(duration_s=8.0, how=StoreOutage.HANG), during_rendezvous())
    kill = job.inject(KillNode())                           # cascading: the store hangs while
    outage = armed.wait(timeout=60)                         # the survivor re-forms the rendezvous
    recovery = job.wait_for_recovery(kill, timeout=180)

    assert outage.injected_at > kill.injected_at
    assert recovery.rendezvous_s >= (outage.injected_at - kill.injected_at) + 8.0 * 0.9
    assert recovery.world_size_after == 1
    assert recovery.lost_steps <= CHECKPOINT_EVERY
