"""hung-rank: one worker stops inside training, alive (SIGSTOP), its node and agent alive. Nothing
tells its peers but their collective timeout: they find out at it (within 3 s), never by a closed
connection, and the job recovers (the hung worker's agent waits its 30 s shutdown timeout before
it kills the stopped worker, which ignores SIGTERM)."""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE

from elastic_chaos.analysis.hang import HANG

pytestmark = pytest.mark.slow


def test_a_hung_rank_is_detected_at_the_collective_timeout(run_hypothesis):
    run = run_hypothesis("hung-rank", **CADENCE, pg_timeout_s=10.0)
    detection = run.result().faults[0].group(HANG)
    assert detection is not None and detection.causes == ["timeout"]
