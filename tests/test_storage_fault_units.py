"""The storage faults' options, plans and refusals, and the op log turned into timeline events
(no mount needed: the op log is a file, the refusals are what a platform without a layer says)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from elastic_chaos.errors import SpecError
from elastic_chaos.events import CheckpointEv, Timeline
from elastic_chaos.faults.catalog import fault_class, faults_for
from elastic_chaos.faults.storage import (
    KillAtSavePoint,
    SlowStorage,
    StorageErrors,
    StorageHang,
    folder_saves,
    parse_ops,
)
from elastic_chaos.hypotheses.catalog import get
from elastic_chaos.hypotheses.savepoints import expected_dcp_resume, hollow_saves, newest_complete, parse_points
from elastic_chaos.platforms.capabilities import CheckpointStorage
from elastic_chaos.platforms.local.platform import LocalPlatform
from elastic_chaos.spec import JobSpec
from elastic_chaos.storagefs import ALL, Errors, Hang, Kind, Latency, SavePoint, Throttle
from elastic_chaos.watchers.storage import StorageOpWatcher

KINDS = ("slow-storage", "storage-hang", "storage-full", "storage-errors", "storage-readonly", "kill-at-save-point")


def test_every_storage_fault_is_in_the_catalog_needs_the_storage_capability_and_forces_the_layer():
    local = faults_for("local")
    for kind in KINDS:
        assert local[kind].requires is CheckpointStorage
        assert fault_class(kind, "kubernetes") is local[kind]
        assert get(kind).forced.get("storage_layer") is True
    assert get("grace-period").forced.get("storage_layer") is True


def test_op_classes_name_the_requests_they_cover_and_a_wrong_one_says_which_exist():
    assert parse_ops("write,fsync") == {Kind.WRITE, Kind.FSYNC, Kind.FSYNCDIR}
    assert parse_ops("all") == ALL
    with pytest.raises(SpecError, match="a comma list of write, read, fsync"):
        parse_ops("write,bogus")


def test_slow_storage_is_a_latency_and_or_a_cap():
    assert SlowStorage().rules() == (Latency(0.5, ops=parse_ops("write,fsync,rename,open")),)
    both = SlowStorage(latency_s=0.1, throughput_mb_s=2.0).rules()
    assert both[1] == Throttle(2e6)
    with pytest.raises(SpecError, match="needs a --latency above 0 or a --throughput"):
        SlowStorage(latency_s=None)
    with pytest.raises(SpecError, match="ops"):
        SlowStorage(ops="fsync,nothing")


def test_a_hang_ends_itself_on_time_and_a_failing_volume_takes_a_count_or_a_fraction():
    assert StorageHang(duration_s=7).rules() == (Hang(seconds=7.0, ops=ALL),)
    assert StorageErrors().rules()[0].count == 1
    assert StorageErrors(fraction=0.25, errno="ETIMEDOUT").rules()[0] == Errors(
        errno=110, fraction=0.25, ops=parse_ops("write,fsync,close"))
    with pytest.raises(SpecError, match="--count or --fraction, not both"):
        StorageErrors(count=2, fraction=0.5)
    with pytest.raises(SpecError, match="an errno name"):
        StorageErrors(errno="EBOGUS")


def test_the_save_points_parse_in_order_and_all_means_the_protocols_order():
    assert parse_points("all") == tuple(p for p in SavePoint if p is not SavePoint.BEFORE_UNLINK)
    assert parse_points("before-rename,mid-write") == (SavePoint.BEFORE_RENAME, SavePoint.MID_WRITE)
    with pytest.raises(SpecError, match="after-create, mid-write"):
        parse_points("before-lunch")
    assert newest_complete(["ckpt-00000020.pt", "ckpt-00000040.pt", "notes.txt"]) == 40
    assert newest_complete(["model.pt"]) is None


def test_a_dcp_save_has_its_own_points_and_a_file_points_name_says_which_format_it_needs():
    points = parse_points("all", dcp=True)
    assert [p.name for p in points] == ["shard-mid-write", "shard-before-fsync", "metadata-before-rename",
                                        "metadata-after-rename", "pointer-before-rename", "pointer-after-rename",
                                        "prune-metadata", "prune-shard"]
    [meta] = parse_points("metadata-before-rename", dcp=True)
    assert meta.point is SavePoint.BEFORE_RENAME and meta.path == "step-*/.metadata*"
    with pytest.raises(SpecError, match="give --checkpoint-format dcp"):
        parse_points("metadata-before-rename")
    with pytest.raises(SpecError, match="saves with --checkpoint-format dcp"):
        parse_points("before-rename", dcp=True)
    with pytest.raises(SpecError, match="shard-mid-write"):
        get("kill-at-save-point").params(points="shard-middle")


@pytest.mark.parametrize(("detail", "expected"), [
    ({"complete": ["step-00000020", "step-00000030"], "partial": ["step-00000040"], "pointer": "step-00000030"},
     (30, 30)),   # shards or .metadata.tmp of 40 written: 40 is partial, the pointer's is the newest
    ({"complete": ["step-00000020", "step-00000030", "step-00000040"], "partial": [], "pointer": "step-00000030"},
     (30, 40)),   # 40 complete, latest not moved yet: the pointer's or the newest complete
    ({"complete": ["step-00000020"], "partial": ["step-00000030"], "pointer": "step-00000030"}, (20, 20)),
    ({"complete": [], "partial": ["step-00000010"], "pointer": None}, (0, 0)),   # nothing complete: from scratch
], ids=["partial-newest", "complete-not-pointed", "pointer-at-partial", "none"])
def test_after_a_kill_in_a_dcp_save_the_restart_may_resume_only_from_a_save_complete_at_the_kill(detail, expected):
    low, high, _ = expected_dcp_resume(detail)
    assert (low, high) == expected


def test_a_folder_with_its_metadata_and_fewer_shards_than_its_world_had_ranks_is_hollow():
    detail = {"complete": ["step-00000020", "step-00000040", "step-00000060"], "partial": [],
              "shards": {"step-00000020": 0, "step-00000040": 2, "step-00000060": 1}}
    # step 60 was trained at world size 1 (a shrunken job): one shard is whole; step 20's two are gone
    assert hollow_saves(detail, {20: 2, 40: 2, 60: 1}) == ["step-00000020 (0 of 2 shards)"]
    assert hollow_saves(detail, {}) == []   # a step the timeline never saw trained is not judged


def test_the_fault_records_the_volumes_folder_saves_and_what_latest_names(tmp_path):
    for step, complete in ((20, True), (30, False)):
        (tmp_path / f"step-{step:08d}").mkdir()
        (tmp_path / f"step-{step:08d}" / "__0_0.distcp").write_bytes(b"s")
        if complete:
            (tmp_path / f"step-{step:08d}" / ".metadata").write_bytes(b"m")
    (tmp_path / "workdir").mkdir()   # the local cluster's volume holds the run's working directory too
    (tmp_path / "workdir" / "notes.txt").write_text("not a save")
    assert folder_saves(tmp_path) == {"complete": ["step-00000020"], "partial": ["step-00000030"], "pointer": None,
                                      "shards": {"step-00000020": 1, "step-00000030": 1}}
    (tmp_path / "latest").write_text("step-00000020\n")
    assert folder_saves(tmp_path)["pointer"] == "step-00000020"
    assert folder_saves(tmp_path / "step-00000020") == {}   # no folder below: a file save's volume


def test_a_kill_at_a_save_point_plans_hold_kill_release():
    plan = KillAtSavePoint(point=SavePoint.MID_WRITE).plan(None)  # type: ignore[arg-type]
    assert plan.actions[0].startswith("hold the first writer at mid-write")
    assert "SIGKILL every process of the writer's node" in plan.actions[1]


def test_a_job_that_did_not_ask_for_the_layer_refuses_storage_faults_saying_how_to_ask(tmp_path):
    timeline = Timeline(tmp_path / "timeline.jsonl")
    platform = LocalPlatform(timeline, tmp_path)
    platform.job = JobSpec()         # running, without --storage-layer
    reason = platform.lacks(CheckpointStorage)
    timeline.close()
    assert reason is not None and ("--storage-layer" in reason or "FUSE" in reason)


def write_ops(path: Path, lines: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_the_op_log_becomes_saves_stalls_and_a_summary(tmp_path):
    ops = tmp_path / "ops.jsonl"
    node = {"node": "node-0", "pid": 7, "tid": 7}
    write_ops(ops, [
        {"t": 1.0, "dur": 0.5, "op": "opendir", "path": "", "stalled_s": 0.5, **node},
        {"t": 1.5, "dur": 0.01, "op": "create", "path": ".a.tmp", "fh": 1, **node},
        {"t": 1.6, "dur": 0.3, "op": "fsync", "path": ".a.tmp", "fh": 1, "stalled_s": 0.3, **node},
        {"t": 1.9, "dur": 0.0, "op": "release", "path": ".a.tmp", "fh": 1, "bytes": 7000, "writes": 1, **node},
        {"t": 2.0, "dur": 0.2, "op": "rename", "path": ".a.tmp", "dst": "a", "stalled_s": 0.2, **node},
        {"t": 3.0, "dur": 0.0, "op": "create", "path": ".b.tmp", "error": "EROFS", "injected": True, **node},
        {"t": 3.5, "op": "rule-set", "rule": "ro"},
    ])
    timeline = Timeline(tmp_path / "timeline.jsonl")
    watcher = StorageOpWatcher(timeline, ops, mountpoint=tmp_path)
    watcher.poll()
    watcher.poll()          # each save and stall once
    watcher.finish()
    timeline.close()
    saves = timeline.select(CheckpointEv.STORAGE_SAVE)
    assert [(e.node, e.data.final, e.data.error) for e in saves] == [("node-0", "a", None), ("node-0", None, "EROFS")]
    assert abs(saves[0].data.duration_s - 0.7) < 1e-6 and abs(saves[0].data.stalled_s - 0.5) < 1e-6
    [stall] = timeline.select(CheckpointEv.STORAGE_STALL)
    assert (stall.data.op, stall.data.stalled_s) == ("opendir", 0.5)
    [summary] = timeline.select(CheckpointEv.STORAGE_SUMMARY)
    assert summary.data.failed == {"EROFS": 1} and abs(summary.data.stalled_s - 1.0) < 1e-6
