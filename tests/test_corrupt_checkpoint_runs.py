"""corrupt-checkpoint on real jobs (slow): bits flipped in the newest save, then a restart from it. The
reference trainer without checksums trains on from the corrupted state, and the verdict says so naming
what diverged; with --checkpoint-checksum it notices, falls back to the save before and ends as a clean
run does."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from elastic_chaos.analysis.final_state import CHECK as FINAL
from elastic_chaos.events import CheckpointEv, FaultEv
from elastic_chaos.hypotheses.corruption import CHECK

pytestmark = pytest.mark.slow


def reasons(run) -> dict[str, str]:
    return {c.name: c.reason for c in run.verdict.checks}


def corruption(run) -> dict:
    injected = next(e for e in run.timeline.select(FaultEv.INJECTED) if e.data.fault == "corrupt-checkpoint")
    return dict(injected.data.detail)


def test_a_job_without_checksums_trains_on_from_the_corrupted_save_and_the_verdict_names_it(run_hypothesis):
    run = run_hypothesis("corrupt-checkpoint", expect_failed={CHECK, FINAL})
    said, hit = reasons(run), corruption(run)
    assert "without noticing and trained on from corrupted state" in said[CHECK]
    assert said[FINAL].startswith("final state: diverged:")
    assert f"({hit['tensor']}, the tensor hit, differs too)" in said[CHECK]
    assert not run.timeline.select(CheckpointEv.CORRUPT)
    loaded = run.timeline.select(CheckpointEv.LOADED, after=run.timeline.select(FaultEv.INJECTED)[-1].t)
    assert loaded and loaded[0].data.step == hit["step"]          # it resumed from the corrupted save itself
    # the original was kept, and put back at teardown where the file still held the corruption
    original = Path(hit["original"])
    assert original.is_file() and original.parent == run.report_dir / "corrupt-checkpoint"
    corrupted = Path(hit["file"])
    if corrupted.exists():
        assert corrupted.read_bytes() == original.read_bytes()


def test_a_job_with_checksums_notices_falls_back_and_ends_as_a_clean_run(run_hypothesis):
    run = run_hypothesis("corrupt-checkpoint", checksum=True)
    said, hit = reasons(run), corruption(run)
    assert said[CHECK].startswith("the job noticed the corruption") and "ChecksumMismatch" in said[CHECK]
    assert said[FINAL].startswith("final state: equal (bitwise")
    corrupt = run.timeline.select(CheckpointEv.CORRUPT)
    assert [str(Path(e.data.path).resolve()) for e in corrupt][:1] == [hit["file"]]
    loaded = run.timeline.select(CheckpointEv.LOADED, after=corrupt[0].t)
    assert loaded and loaded[0].data.step < hit["step"]            # it fell back to an older save
    comparison = json.loads((run.report_dir / "final-state" / "comparison.json").read_text())
    assert comparison["equal"] is True
