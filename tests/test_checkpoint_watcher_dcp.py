"""The checkpoint watcher on DCP saves its test writes: a folder of shards is one save once its
``.metadata`` is there (never before), step-numbered folders watched as a glob carry their step,
and a pointer file (``latest``) naming a folder is no save of its own."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from elastic_chaos.events import CheckpointEv, Event, ProgressEv, Timeline, of
from elastic_chaos.events.progress_events import Step
from elastic_chaos.watchers.checkpoints import CheckpointWatcher
from elastic_chaos.watchers.folder_saves import folder_step, pointer_target, split_glob


@pytest.fixture
def timeline(tmp_path: Path) -> Iterator[Timeline]:
    """A timeline written to timeline.jsonl, as a run's is."""
    tl = Timeline(tmp_path / "timeline.jsonl")
    yield tl
    tl.close()


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    """The folder a script saves its step folders into."""
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    return folder


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def saves(tl: Timeline) -> list[Event]:
    return of(tl.events(), CheckpointEv.SAVED)


def started(tl: Timeline, path: Path) -> CheckpointWatcher:
    """A watcher running in its thread, past its baseline."""
    w = CheckpointWatcher(tl, path)
    w.poll()
    w.start()
    return w


def write_shards(folder: Path, ranks: int = 2) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        (folder / f"__{rank}_0.distcp").write_bytes(b"s" * (100 + rank))


def write_metadata(folder: Path) -> None:
    """As DCP's coordinator does: a temporary, renamed onto ``.metadata``."""
    tmp = folder / ".metadata.tmp"
    tmp.write_bytes(b"m" * 10)
    os.replace(tmp, folder / ".metadata")


def point(directory: Path, folder: Path) -> None:
    tmp = directory / ".latest.tmp"
    tmp.write_text(folder.name + "\n")
    os.replace(tmp, directory / "latest")


def test_shards_without_metadata_are_no_save_and_its_metadata_completes_one(timeline: Timeline,
                                                                             ckpt: Path) -> None:
    w = started(timeline, ckpt)
    step = ckpt / "step-00000040"
    write_shards(step)
    time.sleep(6 * w.interval_s)  # the shards held still for several polls: still no save
    assert saves(timeline) == []
    write_metadata(step)
    assert wait_until(lambda: len(saves(timeline)) == 1)
    time.sleep(3 * w.interval_s)
    w.stop()
    [save] = saves(timeline)
    assert save.data.path == str(step) and save.data.files == 3 and save.data.size == 100 + 101 + 10
    assert save.data.step == 40 and save.data.step_from == "folder"


def test_a_partial_save_never_counts_even_as_the_run_ends(timeline: Timeline, ckpt: Path) -> None:
    w = started(timeline, ckpt)
    write_shards(ckpt / "step-00000060", ranks=3)
    time.sleep(4 * w.interval_s)
    w.stop()  # the final poll emits whatever is complete: a folder without .metadata is not
    assert saves(timeline) == []


def test_each_step_folder_under_a_glob_is_its_own_save_with_its_step(timeline: Timeline, ckpt: Path) -> None:
    w = started(timeline, ckpt / "step-*")
    for step in (20, 40):
        folder = ckpt / f"step-{step:08d}"
        write_shards(folder)
        write_metadata(folder)
        point(ckpt, folder)
    assert wait_until(lambda: len(saves(timeline)) == 2)
    time.sleep(3 * w.interval_s)
    w.stop()
    assert [(Path(e.data.path).name, e.data.step, e.data.step_from, e.data.files) for e in saves(timeline)] == [
        ("step-00000020", 20, "folder", 3), ("step-00000040", 40, "folder", 3)]


def test_a_plain_folder_save_under_a_glob_takes_its_folders_step(timeline: Timeline, ckpt: Path) -> None:
    w = started(timeline, ckpt / "step-*")
    folder = ckpt / "step-300"
    folder.mkdir()
    (folder / "model.pt").write_bytes(b"m" * 10)
    (folder / "optim.pt").write_bytes(b"o" * 10)
    (ckpt / "notes.txt").write_bytes(b"outside the glob")
    assert wait_until(lambda: len(saves(timeline)) == 1)
    time.sleep(3 * w.interval_s)
    w.stop()
    [save] = saves(timeline)
    assert save.data.path == str(folder) and save.data.step == 300 and save.data.files == 2


def test_the_pointer_file_is_no_save_of_its_own(timeline: Timeline, ckpt: Path) -> None:
    w = started(timeline, ckpt)
    folder = ckpt / "step-00000020"
    write_shards(folder)
    write_metadata(folder)
    assert wait_until(lambda: len(saves(timeline)) == 1)
    time.sleep(2 * w.interval_s)
    point(ckpt, folder)     # written after the save, as the reference trainer does
    assert wait_until(lambda: w.pointers >= 1)
    time.sleep(3 * w.interval_s)
    w.stop()
    assert [e.data.path for e in saves(timeline)] == [str(folder)]


def test_a_pointer_moved_to_an_older_folder_is_no_save(timeline: Timeline, ckpt: Path) -> None:
    for step in (20, 40):
        write_shards(ckpt / f"step-{step:08d}")
        write_metadata(ckpt / f"step-{step:08d}")
    point(ckpt, ckpt / "step-00000040")
    w = started(timeline, ckpt)          # all of it is the baseline
    point(ckpt, ckpt / "step-00000020")  # a rollback moves the pointer: nothing was saved
    assert wait_until(lambda: w.pointers >= 1)
    time.sleep(3 * w.interval_s)
    w.stop()
    assert saves(timeline) == []


def test_a_folder_without_a_step_in_its_name_takes_the_step_before_it(timeline: Timeline, ckpt: Path) -> None:
    now = time.time()
    timeline.add(Event.make(ProgressEv.STEP, now - 1.0, "node-0", Step(step=7, rank=0)))
    w = started(timeline, ckpt)
    folder = ckpt / "final"
    write_shards(folder)
    write_metadata(folder)
    assert wait_until(lambda: len(saves(timeline)) == 1)
    w.stop()
    [save] = saves(timeline)
    assert save.data.path == str(folder) and save.data.step == 7 and save.data.step_from == "progress"


def test_folder_names_that_carry_a_step() -> None:
    assert [folder_step(Path(n)) for n in ("step-00000040", "step_1000", "checkpoint-500", "global_step200",
                                           "1000", "epoch-3", "final", "step-1-old")] == [
        40, 1000, 500, 200, 1000, None, None, None]


def test_a_glob_splits_into_the_folder_to_scan_and_the_pattern(tmp_path: Path) -> None:
    assert split_glob(tmp_path / "ckpt" / "step-*") == (tmp_path / "ckpt", ("step-*",))
    assert split_glob(tmp_path / "ckpt") == (tmp_path / "ckpt", ())


def test_a_pointer_names_an_existing_folder_in_one_short_line(tmp_path: Path) -> None:
    (tmp_path / "step-1").mkdir()
    for name, text in (("latest", "step-1\n"), ("gone", "step-2"), ("two", "step-1\nstep-1"), ("data", "x" * 10)):
        (tmp_path / name).write_text(text)
    found = {n: pointer_target(tmp_path / n, (tmp_path / n).stat().st_size) for n in ("latest", "gone", "two", "data")}
    assert found == {"latest": tmp_path / "step-1", "gone": None, "two": None, "data": None}


def test_a_real_dcp_save_is_one_save_with_its_folders_step(timeline: Timeline, ckpt: Path) -> None:
    # torch's own writer (a process of its own, no process group): its shard, then .metadata through a rename
    w = started(timeline, ckpt / "step-*")
    code = ("import sys, torch\nfrom torch.distributed.checkpoint.state_dict_saver import save\n"
            "save({'model': {'w': torch.ones(4096)}, 'step': 100}, checkpoint_id=sys.argv[1], no_dist=True)")
    subprocess.run([sys.executable, "-c", code, str(ckpt / "step-00000100")], check=True, timeout=120)
    assert wait_until(lambda: len(saves(timeline)) == 1)
    time.sleep(3 * w.interval_s)
    w.stop()
    [save] = saves(timeline)
    assert save.data.path == str(ckpt / "step-00000100") and save.data.step == 100 and save.data.step_from == "folder"
    assert save.data.files == len(list((ckpt / "step-00000100").iterdir())) >= 2
