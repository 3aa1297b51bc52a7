"""A PyTorch Lightning job loses a node: it resumes from Lightning's last checkpoint.

Seed 002's jobs: Lightning ``ddp`` under TorchElastic. elastic_chaos/trainer/lightning_example.py
is such a job (CPU, gloo); its only elastic-chaos line is ElasticChaosCallback,
which reports Lightning's global step and its checkpoint writes and restores, so
the lost steps are measured from the step Lightning restored, not inferred.
"""
from __future__ import annotations

import importlib.util
import os

import pytest
from scenario_settings import LOSS_RDZV

from elastic_chaos.events import CheckpointEv

if importlib.util.find_spec("lightning") is None:  # make install has it; CI must not skip
    _why = "needs the lightning extra: pip install -e '.[lightning]' (make install includes it)"
    if os.environ.get("CI") == "true":
        raise RuntimeError(_why)
    pytest.skip(_why, allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.platforms("local")]   # the image has no lightning

CHECKPOINT_EVERY = 10


def test_a_lightning_job_resumes_from_its_last_checkpoint_after_losing_a_node(run_hypothesis):
    run = run_hypothesis("kill-node", replace_lost_nodes=False, **LOSS_RDZV,  # timing is not the point
                         script=["-m", "elastic_chaos.trainer.lightning_example",
                                 "--checkpoint-every", str(CHECKPOINT_EVERY),
                                 "--step-time", "0.1"],
                         checkpoint_every=CHECKPOINT_EVERY, steady_steps=25, timeout_s=240)

    fault, recovery = run.faults[0], run.recoveries()[0]
    loaded = run.timeline.select(CheckpointEv.LOADED, after=fault.injected_at)
    assert loaded and loaded[0].data.reason == "lightning"   # Lightning's own restore, reported
    assert recovery.resumed_from_step == loaded[0].data.step and recovery.resumed_from_step % CHECKPOINT_EVERY == 0
    saved = run.timeline.select(CheckpointEv.SAVED)
    assert any(e.data.path.endswith("last.ckpt") for e in saved)
