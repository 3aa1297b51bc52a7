"""The checkpoint volume misbehaving under a training job: hung, full, failing, read-only, slow.

Each puts the job's checkpoint folder behind the storage layer (a FUSE passthrough mounted
before the nodes start) and sets its fault on the volume, so the trainer's own writer meets it
in the kernel path. A hang shorter than the collective timeout costs a stall of about its length
and nothing else; a save that fails (ENOSPC, EIO, EROFS) restarts the job from the newest
complete checkpoint; a slow volume slows saves, and an interruption inside the slowdown still
saves within its grace period. Skipped where FUSE cannot be used (a failure under CI=true).
"""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE, STORAGE_PLATFORMS, STORAGE_REASON, require_storage_layer

from chaos.analysis.storage import STORAGE

pytestmark = [pytest.mark.slow, pytest.mark.platforms(*STORAGE_PLATFORMS, reason=STORAGE_REASON)]


@pytest.fixture(autouse=True)
def _fuse() -> None:
    require_storage_layer()


def test_a_hung_volume_stalls_the_job_about_as_long_and_it_trains_on_without_a_restart(run_hypothesis):
    run = run_hypothesis("storage-hang", duration_s=6.0, **CADENCE)
    cost = run.result().faults[0].group(STORAGE)
    assert cost is not None and cost.stalled_s is not None and cost.stalled_s >= 3.0


def test_a_full_volume_fails_a_save_and_the_job_resumes_from_the_newest_complete_checkpoint(run_hypothesis):
    run_hypothesis("storage-full", duration_s=4.0, **CADENCE)


def test_eio_on_a_save_restarts_the_job_from_the_newest_complete_checkpoint(run_hypothesis):
    run_hypothesis("storage-errors", count=1, **CADENCE)


def test_a_read_only_volume_fails_saves_until_it_is_writable_again(run_hypothesis):
    run_hypothesis("storage-readonly", duration_s=4.0, **CADENCE)


def test_an_interruption_inside_a_slowdown_still_saves_within_its_grace_period(run_hypothesis):
    run = run_hypothesis("slow-storage", latency_s=0.3, duration_s=30.0, interrupt_after_s=2.0, notice_s=1.0,
                         grace_s=20.0, **CADENCE)
    spot = run.result().faults[1].group(STORAGE)
    assert spot is not None and spot.saved_in_time and spot.grace_left_s is not None and spot.grace_left_s > 0
