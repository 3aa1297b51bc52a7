"""spot-interruption: a spot reclaim with notice. The trainer checkpoints on the notice and
on SIGTERM, so nothing is lost (AWS's sequence, with the 2-minute notice scaled down)."""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE, LOSS_RDZV

pytestmark = pytest.mark.slow


def test_a_graceful_spot_interruption_loses_no_steps(run_hypothesis):
    run_hypothesis("spot-interruption", **CADENCE, replace_lost_nodes=False,
                   rebalance_lead_s=1.0, notice_s=4.0, grace_s=20.0, **LOSS_RDZV)
