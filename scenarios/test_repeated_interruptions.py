"""A spot fleet's life: interruptions as a Poisson process, with replacement.

With torch's default rendezvous timing this scenario once never recovered: a
replacement killed while it waited to join stayed in the rendezvous wait list
until its keep-alive expired (15 s), and every round the survivors completed
in the meantime was followed at once by another restart for the "waiting"
dead node — a restart storm, then a round with a dead participant. The fleet
below runs the fast preset (a dead node is dropped after 4 s).
"""
from __future__ import annotations

import pytest
from scenario_settings import CHECKPOINT_EVERY, STEADY

from chaos.analysis.recovery import analyze
from chaos.faults import KillNode

pytestmark = [pytest.mark.slow, pytest.mark.platforms("local")]


def test_every_interruption_of_a_poisson_process_is_recovered_from(elastic_job):
    job = elastic_job(nodes="1:2", checkpoint_every=CHECKPOINT_EVERY, provisioning_delay_s=2.0,
                      max_restarts=20, rdzv_preset="fast")
    job.wait_for_step(STEADY)

    faults = job.repeat(lambda: KillNode(), mtbf_s=20.0, duration_s=45.0, seed=3, min_alive=1)
    assert len(faults) >= 2, "seed 3 over 45 s at a 20 s mean gives three interruptions"
    job.wait_for_recovery(faults[-1], timeout=150)

    recoveries = analyze(job.timeline.events())
    assert len(recoveries) == len(faults)
    # each recovered, or was overtaken by the next interruption (then the next one counts)
    overtaken = [r for r in recoveries[:-1] if not r.recovered]
    assert all("the next fault came before" in " ".join(r.missing) for r in overtaken)
    assert recoveries[-1].recovered
    assert all(r.lost_steps <= CHECKPOINT_EVERY for r in recoveries if r.lost_steps is not None)
    assert 0.0 < job.goodput < 1.0
    assert job.samples.exactly_once, job.samples.summary()
