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
    # last_call_timeout 3 s: with torch's 30 s the shrink alone costs ~45 s (measured)
    job = elastic_job(nodes="1:2", checkpoint_every=CHECKPOINT_EVERY, replace_lost_nodes=False, last_call_timeout=3)
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


def test_a_second_loss_while_the_job_re_forms_still_leaves_a_working_job(elastic_job):
    from chaos.faults.triggers import during_rendezvous

    job = elastic_job(nodes="1:3", checkpoint_every=CHECKPOINT_EVERY, replace_lost_nodes=False, last_call_timeout=3)
    job.wait_for_step(50)

    second = job.arm(KillNode(node="node-1"), during_rendezvous())     # cascade: hit while re-forming
    first = job.inject(KillNode(node="node-2"))
    cascade = second.wait(timeout=60)
    recovery = job.wait_for_recovery(first, timeout=180)

    assert cascade.injected_at > first.injected_at
    assert recovery.world_size_before == 3 and recovery.world_size_after == 1
    assert recovery.lost_steps <= CHECKPOINT_EVERY
