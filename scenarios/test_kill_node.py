"""kill-node: losing a node, the job re-forms its rendezvous and resumes from its last checkpoint.

The real twin: a spot instance reclaimed without notice, or a host that dies.
Every process of the node is gone at once and the kernel closes its sockets,
so survivors see their collectives fail and restart through a new rendezvous.
The hypothesis (chaos/hypotheses/losses.py ``kill_node``) is the one
``elastic-chaos run kill-node`` checks, on whatever ``--platform`` this session runs.
"""
from __future__ import annotations

import pytest
from scenario_settings import CHECKPOINT_EVERY, FAST_RDZV

pytestmark = pytest.mark.slow


def test_kill_node_shrinks_the_job_and_costs_at_most_one_checkpoint_interval(run_hypothesis):
    # last_call_timeout 3 s: with torch's 30 s the shrink alone costs ~45 s (measured)
    run_hypothesis("kill-node", checkpoint_every=CHECKPOINT_EVERY, replace_lost_nodes=False, **FAST_RDZV)


def test_kill_node_with_a_replacement_grows_the_world_back(run_hypothesis):
    run = run_hypothesis("kill-node", checkpoint_every=CHECKPOINT_EVERY, provisioning_delay_s=3.0)
    assert run.recoveries()[0].replacement_s >= 3.0


def test_cascading_loss_while_the_job_re_forms_still_leaves_a_working_job(run_hypothesis):
    run_hypothesis("cascading-loss", nodes="1:3", checkpoint_every=CHECKPOINT_EVERY, replace_lost_nodes=False,
                   **FAST_RDZV)
