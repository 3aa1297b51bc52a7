"""kill-node: losing a node, the job re-forms its rendezvous and resumes from its last checkpoint.

The real twin: a spot instance reclaimed without notice, or a host that dies.
Every process of the node is gone at once and the kernel closes its sockets,
so survivors see their collectives fail and restart through a new rendezvous.
The hypothesis (elastic_chaos/hypotheses/losses.py ``kill_node``) is the one
``elastic-chaos run kill-node`` checks, on whatever ``--platform`` this session runs.
"""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE, LOSS_RDZV

pytestmark = pytest.mark.slow


def test_kill_node_shrinks_the_job_and_costs_at_most_one_checkpoint_interval(run_hypothesis):
    # the fast preset's rendezvous: with torch's defaults (last call 30 s, keep-alive 5 s x 3) the
    # shrink alone costs ~45 s (measured). extra_steps: training well past the rollback, so the
    # exactly-once accounting covers a kill, a restore and a resize (scenarios/test_data_accounting.py
    # shows the check failing a sampler that does not)
    run = run_hypothesis("kill-node", **CADENCE, replace_lost_nodes=False, extra_steps=30,
                         **LOSS_RDZV)
    assert run.recoveries()[0].lost_steps > 0 and run.samples.rolled_back_steps > 0   # a real rollback happened
    assert "exactly-once" in {c.name for c in run.verdict.checks}


def test_kill_node_with_a_replacement_grows_the_world_back(run_hypothesis):
    run = run_hypothesis("kill-node", **CADENCE, provisioning_delay_s=3.0)
    assert run.recoveries()[0].replacement_s >= 3.0


def test_cascading_loss_while_the_job_re_forms_still_leaves_a_working_job(run_hypothesis):
    run_hypothesis("cascading-loss", nodes="1:3", **CADENCE, replace_lost_nodes=False,
                   **LOSS_RDZV)
