"""store-host-loss: c10d keeps the rendezvous in a TCPStore on one node (worker-0 of a
PyTorchJob), a single point of failure that etcd-v2 does not have. The hypothesis
"the job survives" fails, and the evidence says why."""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE

pytestmark = pytest.mark.slow


def test_losing_the_c10d_store_host_kills_the_job_for_good(run_hypothesis):
    from elastic_chaos.analysis.outcome import FailureCause
    run = run_hypothesis("store-host-loss", nodes="1:3", **CADENCE,
                         expect_failed={"job-survives"})
    assert run.faults[0].target == run.platform.nodes()[0].name     # the first node hosts the store
    assert FailureCause.RENDEZVOUS_FAILED in run.outcome().causes, run.outcome().reasons
    assert run.recoveries()[0].recovered is False
