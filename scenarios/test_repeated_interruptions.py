"""A spot fleet's life: interruptions as a Poisson process, with replacement."""
from __future__ import annotations

import pytest
from conftest import CHECKPOINT_EVERY, FAST_RDZV, STEADY

from chaos.analysis import analyze
from chaos.faults import KillNode

pytestmark = [pytest.mark.slow, pytest.mark.platforms("local")]


def test_every_interruption_of_a_poisson_process_is_recovered_from(elastic_job):
    job = elastic_job(nodes="1:2", checkpoint_every=CHECKPOINT_EVERY, provisioning_delay_s=2.0,
                      max_restarts=10, **FAST_RDZV)
    job.wait_for_step(STEADY)

    faults = job.repeat(lambda: KillNode(), mtbf_s=20.0, duration_s=60.0, seed=3, min_alive=1)
    assert faults, "seed 3 over 60 s at a 20 s mean must produce interruptions"
    job.wait_for_recovery(faults[-1], timeout=150)

    recoveries = analyze(job.timeline.events())
    assert len(recoveries) == len(faults)
    assert all(r.recovered for r in recoveries)
    assert all(r.lost_steps <= CHECKPOINT_EVERY for r in recoveries)
    assert 0.0 < job.goodput < 1.0
    assert job.samples.exactly_once, job.samples.summary()
