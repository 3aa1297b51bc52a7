"""scale-up: capacity comes back, a node joins and the world grows, free of the restart budget."""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE, FAST_RDZV

pytestmark = pytest.mark.slow


def test_a_joining_node_grows_the_world_without_spending_restarts(run_hypothesis):
    run_hypothesis("scale-up", start_nodes=1, **CADENCE, max_restarts=1, **FAST_RDZV)
