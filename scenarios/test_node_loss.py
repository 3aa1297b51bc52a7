"""Losing a node: the job re-forms its rendezvous and resumes from its last checkpoint.

The real twin: a spot instance reclaimed without notice, or a host that dies.
Every process of the node is gone at once and the kernel closes its sockets,
so survivors see their collectives fail and restart through a new rendezvous.
"""
from __future__ import annotations

import pytest

from chaos.faults import KillNode

pytestmark = [pytest.mark.slow, pytest.mark.platforms("local", "kind", "kubernetes", "eks")]

CHECKPOINT_EVERY = 20


def test_losing_a_node_costs_at_most_one_checkpoint_interval(elastic_job):
    job = elastic_job(nodes="1:2", checkpoint_every=CHECKPOINT_EVERY, replace_lost_nodes=False)
    job.wait_for_step(50)                                    # steady state, between checkpoints

    fault = job.inject(KillNode())                           # method
    recovery = job.wait_for_recovery(fault, timeout=150)

    assert recovery.lost_steps is not None and recovery.lost_steps <= CHECKPOINT_EVERY
    assert recovery.world_size_before == 2
    assert recovery.world_size_after == 1                    # shrank, kept training
    assert recovery.replacement_s is None                    # nothing was provisioned
    assert recovery.phases["detect"] is not None and recovery.phases["rendezvous"] is not None


def test_a_replacement_node_joins_and_the_world_grows_back(elastic_job):
    job = elastic_job(nodes="1:2", checkpoint_every=CHECKPOINT_EVERY, provisioning_delay_s=3.0)
    job.wait_for_step(50)

    fault = job.inject(KillNode())
    job.wait_for_recovery(fault, timeout=150)
    recovery = job.wait_for_world_size(fault, 2, timeout=150)

    assert recovery.lost_steps is not None and recovery.lost_steps <= CHECKPOINT_EVERY
    assert recovery.world_size_final == 2
    assert recovery.replacement_s is not None and recovery.replacement_s >= 3.0
