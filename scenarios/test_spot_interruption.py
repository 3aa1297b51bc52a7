"""A spot interruption with notice: the trainer checkpoints on the notice and on
SIGTERM, so nothing is lost (AWS's sequence, with the 2-minute notice scaled down)."""
from __future__ import annotations

import pytest
from scenario_settings import CHECKPOINT_EVERY, FAST_RDZV, STEADY

from chaos.faults import SpotInterruption

pytestmark = [pytest.mark.slow, pytest.mark.platforms("local")]


def test_a_graceful_spot_interruption_loses_no_steps(elastic_job):
    job = elastic_job(nodes="1:2", checkpoint_every=CHECKPOINT_EVERY, replace_lost_nodes=False, **FAST_RDZV)
    job.wait_for_step(STEADY)

    fault = job.inject(SpotInterruption(rebalance_lead_s=1.0, notice_s=4.0, grace_s=20.0))
    recovery = job.wait_for_recovery(fault, timeout=150)

    assert recovery.lost_steps == 0
    assert recovery.world_size_after == 1
    events = job.timeline.events()
    seen = {e.data["kind"] for e in events if e.source == "progress" and e.kind == "notice" and e.node == fault.target}
    assert seen == {"rebalance", "interruption"}                         # the node could observe both notices
    reasons = {e.data.get("reason") for e in events if e.source == "checkpoint" and e.kind == "saved"}
    assert {"spot-rebalance", "sigterm"} <= reasons                      # emergency checkpoints taken
    assert fault.hit is not None and fault.hit.action == "sigterm"      # left within the grace period
