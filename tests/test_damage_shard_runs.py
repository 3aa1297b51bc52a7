"""damage-shard on real jobs (slow): one rank's shard of the newest complete DCP save deleted or truncated,
then a worker crash. The reference trainer reports the damaged save unloadable and resumes from the save
before it (the newest intact one), never from the damaged one; the shard's original bytes are kept in the
run's folder and put back where the job left the damage in place."""
from __future__ import annotations

from pathlib import Path

import pytest

from elastic_chaos.events import CheckpointEv, FaultEv
from elastic_chaos.hypotheses.shards import CHECK

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("action", ["delete", "truncate"])
def test_a_dcp_job_resumes_from_the_newest_intact_save_after_a_shard_is_damaged(run_hypothesis, action: str) -> None:
    run = run_hypothesis("damage-shard", shard_action=action, shard_rank=1)
    injected = next(e for e in run.timeline.select(FaultEv.INJECTED) if e.data.fault == "damage-shard")
    hit = dict(injected.data.detail)
    assert hit["action"] == action and Path(hit["file"]).name == "__1_0.distcp"
    assert hit["newest_intact_step"] is not None and hit["newest_intact_step"] < hit["step"]
    said = {c.name: c.reason for c in run.verdict.checks}
    assert said[CHECK].startswith(f"the job resumed from step {hit['newest_intact_step']}, the newest intact save"), \
        said[CHECK]
    # the job said the damaged save did not load, and its first resume loaded the save before it
    corrupt = run.timeline.select(CheckpointEv.CORRUPT, after=injected.t)
    assert Path(hit["folder"]).name in {Path(e.data.path).name for e in corrupt}
    loaded = run.timeline.select(CheckpointEv.LOADED, after=injected.t)
    assert loaded and loaded[0].data.step == hit["newest_intact_step"]
    # nothing lost: the original is in the run's folder, and back in place unless the job saved that step again
    original = Path(hit["original"])
    assert original.is_file() and original.parent == run.report_dir / "damage-shard"
    assert original.stat().st_size == hit["size_before"]
    shard = Path(hit["file"])
    if shard.exists() and (Path(hit["folder"]) / ".metadata").is_file():
        assert shard.stat().st_size == hit["size_before"]
