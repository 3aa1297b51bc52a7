"""The checkpoint volume misbehaving under a training job: hung, full, failing, read-only, slow.

Each puts the job's checkpoint folder behind the storage layer (a FUSE passthrough mounted
before the nodes start) and sets its fault on the volume, so the trainer's own writer meets it
in the kernel path. A hang shorter than the collective timeout costs a stall of about its length
and nothing else; a save that fails (ENOSPC, EIO, EROFS) restarts the job from the newest
complete checkpoint; a slow volume slows saves. Skipped where FUSE cannot be used (a failure
under CI=true).

One-node jobs where a second node adds nothing to what is checked (a stall, a failed save and
its restart), to keep the catalog's time. The hang and the full volume also run in the cluster
catalog; the others run there as `elastic-chaos run ... --platform kubernetes` (each was run so),
kept out of its catalog for time.
"""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE, STORAGE_PLATFORMS, STORAGE_REASON, require_storage_layer

from chaos.analysis.storage import STORAGE

pytestmark = pytest.mark.slow
ONE_NODE = {"nodes": "1:1", **CADENCE}
LOCAL_ONLY = pytest.mark.platforms("local", reason="kept out of the cluster catalog for its time budget; "
                                                  "`elastic-chaos run ... --platform kubernetes` runs it there")
CLUSTER_TOO = pytest.mark.platforms(*STORAGE_PLATFORMS, reason=STORAGE_REASON)


@pytest.fixture(autouse=True)
def _fuse() -> None:
    require_storage_layer()


@CLUSTER_TOO
def test_a_hung_volume_stalls_the_job_about_as_long_and_it_trains_on_without_a_restart(run_hypothesis):
    run = run_hypothesis("storage-hang", duration_s=6.0, **ONE_NODE)
    cost = run.result().faults[0].group(STORAGE)
    assert cost is not None and cost.stalled_s is not None and cost.stalled_s >= 3.0


@CLUSTER_TOO
def test_a_full_volume_fails_a_save_and_the_job_resumes_from_the_newest_complete_checkpoint(run_hypothesis):
    run_hypothesis("storage-full", duration_s=3.0, **ONE_NODE)


@LOCAL_ONLY
def test_eio_on_a_save_restarts_the_job_from_the_newest_complete_checkpoint(run_hypothesis):
    run_hypothesis("storage-errors", count=1, **ONE_NODE)


@LOCAL_ONLY
def test_a_read_only_volume_fails_saves_until_it_is_writable_again(run_hypothesis):
    run_hypothesis("storage-readonly", duration_s=3.0, **ONE_NODE)


@LOCAL_ONLY
def test_a_slow_volume_makes_saves_slower_and_the_job_trains_on(run_hypothesis):
    run = run_hypothesis("slow-storage", latency_s=0.2, duration_s=6.0, slower_by=3.0, **ONE_NODE)
    cost = run.result().faults[0].group(STORAGE)
    assert cost is not None and cost.stalled_s is not None and cost.stalled_s > 0
