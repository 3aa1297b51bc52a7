"""damage-shard: one rank's shard of the newest complete DCP save deleted or truncated; the original kept in
the run's folder and put back at teardown where the shard is still as damaged. On folders shaped as
torch.distributed.checkpoint writes them (the shards' bytes are the test's own: the fault never reads them)."""
from __future__ import annotations

from pathlib import Path, PurePosixPath
from types import SimpleNamespace
from typing import Any

import pytest

from elastic_chaos.errors import InjectionFailed
from elastic_chaos.events import CheckpointEv, FaultEv, Timeline
from elastic_chaos.events.checkpoint_events import Save
from elastic_chaos.faults.shard import FOLDER, DamageShard, ShardAction
from elastic_chaos.platforms.api import CheckpointFolder


def dcp_save(root: Path, step: int, *, complete: bool = True, fill: bytes = b"x") -> Path:
    folder = root / "checkpoints" / f"step-{step:08d}"
    folder.mkdir(parents=True)
    for rank in (0, 1):
        (folder / f"__{rank}_0.distcp").write_bytes(fill * (1000 + rank) + bytes([step % 256]))
    if complete:
        (folder / ".metadata").write_bytes(b"metadata of step %d" % step)
    return folder


def platform(tmp_path: Path) -> Any:
    folder = CheckpointFolder(tmp_path / "checkpoints", PurePosixPath(tmp_path / "checkpoints"))
    return SimpleNamespace(name="local", work_dir=tmp_path, checkpoint_folder=lambda: folder)


def saves(*folders_steps: tuple[Path, int]) -> Timeline:
    timeline = Timeline()
    for folder, step in folders_steps:
        timeline.emit(CheckpointEv.SAVED, "node-0", Save(step=step, path=str(folder), reason="periodic"))
    return timeline


@pytest.mark.parametrize("action", list(ShardAction))
def test_the_newest_complete_save_loses_a_shard_and_the_revert_puts_its_bytes_back(tmp_path, action):
    older, newer = dcp_save(tmp_path, 20), dcp_save(tmp_path, 40)
    dcp_save(tmp_path, 60, complete=False)                       # a save in flight: never the target
    shard = newer / "__1_0.distcp"
    original, untouched = shard.read_bytes(), (older / "__1_0.distcp").read_bytes()
    timeline = saves((older, 20), (newer, 40))
    fault = DamageShard(shard_action=action, shard_rank=1)
    record = fault.inject(platform(tmp_path), timeline)
    assert record.detail["step"] == 40 and record.detail["newest_intact_step"] == 20
    if action is ShardAction.DELETE:
        assert not shard.exists() and record.detail["size_after"] is None
    else:
        assert shard.stat().st_size == len(original) // 2 == record.detail["size_after"]
    assert (newer / ".metadata").is_file() and (older / "__1_0.distcp").read_bytes() == untouched
    kept = Path(record.detail["original"])
    assert kept.parent == tmp_path / FOLDER and kept.read_bytes() == original
    fault.revert(platform(tmp_path), timeline, record)
    assert shard.read_bytes() == original
    fault.revert(platform(tmp_path), timeline, record)           # idempotent: nothing left to undo
    assert len(timeline.select(FaultEv.REVERTED)) == 1


def test_a_save_the_job_named_by_its_pods_path_is_found_in_this_machines_folder(tmp_path):
    """On the local cluster the pods name the folder /checkpoints/<run> and this machine reads it in the
    cluster's shared folder: the platform's CheckpointFolder maps one to the other."""
    newer = dcp_save(tmp_path, 40)
    pods = PurePosixPath("/checkpoints/chaos-1234")
    cluster = SimpleNamespace(name="kubernetes", work_dir=tmp_path,
                              checkpoint_folder=lambda: CheckpointFolder(tmp_path / "checkpoints", pods))
    record = DamageShard(shard_rank=0).inject(cluster, saves((Path(str(pods / newer.name)), 40)))
    assert record.detail["file"] == str(newer / "__0_0.distcp") and not (newer / "__0_0.distcp").exists()
    assert CheckpointFolder(tmp_path, pods).local("/elsewhere/step-00000040") is None


def test_a_step_the_job_saved_again_is_left_as_the_job_left_it(tmp_path):
    folder = dcp_save(tmp_path, 40)
    timeline = saves((folder, 40))
    fault = DamageShard(shard_action=ShardAction.DELETE)
    record = fault.inject(platform(tmp_path), timeline)
    assert record.detail["newest_intact_step"] is None
    (folder / "__1_0.distcp").write_bytes(b"saved again")        # the job's own new save of step 40
    fault.revert(platform(tmp_path), timeline, record)
    assert (folder / "__1_0.distcp").read_bytes() == b"saved again" and not timeline.select(FaultEv.REVERTED)
    assert Path(record.detail["original"]).is_file()


def test_a_rank_the_save_has_no_shard_of_is_refused_and_nothing_is_touched(tmp_path):
    folder = dcp_save(tmp_path, 40)
    with pytest.raises(InjectionFailed, match="no shard of rank 5"):
        DamageShard(shard_rank=5).inject(platform(tmp_path), saves((folder, 40)))
    assert not (tmp_path / FOLDER).exists()


def test_a_job_without_complete_dcp_saves_is_refused(tmp_path):
    partial = dcp_save(tmp_path, 40, complete=False)
    with pytest.raises(InjectionFailed, match="--checkpoint-format dcp"):
        DamageShard().inject(platform(tmp_path), saves((partial, 40)))


DETAIL = {"step": 60, "newest_intact_step": 40, "rank": 1, "action": "truncate", "size_before": 28898,
          "size_after": 14449, "folder": "/run/checkpoints/step-00000060"}


def test_the_verdict_names_the_step_resumed_from_against_the_newest_intact_save():
    from elastic_chaos.hypotheses.shards import judge
    ok, said = judge(DETAIL, 40, [40, 40], "CheckpointException: ... FileNotFoundError: x")
    assert ok and said.startswith("the job resumed from step 40, the newest intact save (step 40), after rank 1's "
                                  "shard of step 60's save truncated to 14449 of 28898 bytes (it reported")
    ok, said = judge(DETAIL, 20, [20], None)
    assert not ok and "not from the newest intact save (step 40)" in said and "(unreported)" in said


def test_a_load_of_the_damaged_save_fails_the_check_and_a_loud_failure_passes_it():
    from elastic_chaos.hypotheses.shards import judge
    ok, said = judge(DETAIL, 60, [60, 60], None)
    assert not ok and said.startswith("the job loaded step 60, the damaged save") and "partial" in said
    ok, said = judge(DETAIL, None, [], "CheckpointException", failed="every node is gone")
    assert ok and "failed loudly" in said and "every node is gone" in said and "never loaded it" in said
    ok, said = judge(DETAIL, None, [60], None, failed="restarts ran out")   # failed, but after loading it
    assert not ok and "trained on from a partial checkpoint" in said
