"""The checkpoint volume misbehaving under a training job: hung, full, failing, read-only.

Each puts the job's checkpoint folder behind the storage layer (a FUSE passthrough mounted
before the nodes start) and sets its fault on the volume, so the trainer's own writer meets it
in the kernel path. A hang shorter than the collective timeout costs a stall of about its length
and nothing else; a save that fails (ENOSPC, EIO, EROFS) restarts the job from the newest
complete checkpoint. Skipped where FUSE cannot be used (a failure under CI=true).

One-node jobs where a second node adds nothing to what is checked (a stall, a failed save and
its restart), and EIO then a read-only volume in one job, to keep the catalog's time. The hang
and the full volume also run in the cluster catalog; the others run there as `elastic-chaos run
... --platform kubernetes` (each was run so), kept out of its catalog for time. slow-storage is
scenarios/test_grace_period.py's (a slow volume under an interruption).
"""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE, STORAGE_PLATFORMS, STORAGE_REASON, require_storage_layer

from elastic_chaos.analysis.groups import FaultMark
from elastic_chaos.analysis.storage import STORAGE, measure_storage
from elastic_chaos.events import CheckpointEv
from elastic_chaos.faults.storage import StorageErrors, StorageReadOnly
from elastic_chaos.hypotheses.storage import stale_resumes

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
def test_eio_then_a_read_only_volume_each_fail_a_save_and_restart_from_the_newest_complete_checkpoint(start_job):
    # one job for both (each as `elastic-chaos run storage-errors` / `storage-readonly` checks it), for time
    run = start_job(storage_layer=True, **{k: v for k, v in ONE_NODE.items() if k != "steady_steps"})
    run.wait_for_step(CADENCE["steady_steps"], timeout=180)
    for fault, errno in ((StorageErrors(count=1), "EIO"), (StorageReadOnly(duration_s=3.0), "EROFS")):
        record = run.inject(fault)
        rec = run.wait_for_recovery(record, timeout=180)
        cost = measure_storage(run.timeline.events(), FaultMark(record.fault, None, record.injected_at))
        assert cost is not None and cost.errors.get(errno, 0) >= 1, cost
        assert stale_resumes(run.timeline.events(), record.injected_at) == []
        assert rec.lost_steps is not None and rec.lost_steps <= CADENCE["checkpoint_every"]
        run.wait_for_steps(5, timeout=60)        # trains on once the volume is back
    assert run.timeline.select(CheckpointEv.CORRUPT) == []
