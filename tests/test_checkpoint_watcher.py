"""The checkpoint file watcher on real files, a real timeline and its own thread: a save of
several files is one save, a save gets the step completed before it, and a path written by
more than one writer at once is said (inotify) while one writer saving often is not."""
from __future__ import annotations

import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from elastic_chaos.events import CheckpointEv, Event, ProgressEv, Timeline, of, read_timeline
from elastic_chaos.events.progress_events import Step
from elastic_chaos.watchers.checkpoints import CheckpointWatcher, NodeRoots
from elastic_chaos.watchers.inotify import filesystem, remote
from elastic_chaos.watchers.writers import Target, Writers

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


@pytest.fixture
def timeline(tmp_path: Path) -> Iterator[Timeline]:
    """A timeline written to timeline.jsonl, as a run's is."""
    tl = Timeline(tmp_path / "timeline.jsonl")
    yield tl
    tl.close()


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    """The folder a script saves into."""
    folder = tmp_path / "ckpt"
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


def races(tl: Timeline) -> list[Event]:
    return of(tl.events(), CheckpointEv.CONCURRENT_WRITES)


def started(tl: Timeline, path: Path | NodeRoots) -> CheckpointWatcher:
    """A watcher running in its thread, past its baseline (what is there now is no save)."""
    w = CheckpointWatcher(tl, path)
    w.poll()  # the baseline, taken before the thread's first look so that the test cannot outrun it
    w.start()
    return w


def save_through_rename(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def save_at(path: Path, mtime: float) -> None:
    """A save whose data was written at ``mtime``."""
    path.write_bytes(b"weights")
    os.utime(path, (mtime, mtime))


# -- one save, however many files -----------------------------------------------------

def test_a_folder_save_of_two_files_is_one_save(timeline: Timeline, ckpt: Path) -> None:
    w = started(timeline, ckpt)
    (ckpt / "model.pt").write_bytes(b"m" * 100)
    (ckpt / "optim.pt").write_bytes(b"o" * 50)
    assert wait_until(lambda: len(saves(timeline)) == 1)
    w.stop()
    [save] = saves(timeline)
    assert save.data.files == 2 and save.data.path == str(ckpt) and save.data.size == 150
    assert save.data.inode is None and save.t == pytest.approx((ckpt / "optim.pt").stat().st_mtime)


def test_a_folder_of_shards_is_one_save_named_by_its_folder(timeline: Timeline, ckpt: Path) -> None:
    w = started(timeline, ckpt)
    step = ckpt / "step-10"
    step.mkdir()
    for rank in range(3):
        (step / f"__{rank}_0.distcp").write_bytes(b"s" * 10)
    (step / ".metadata").write_bytes(b"m")  # DCP's coordinator writes it last: the save is complete
    assert wait_until(lambda: len(saves(timeline)) == 1)
    w.stop()
    [save] = saves(timeline)
    assert save.data.files == 4 and save.data.path == str(step) and save.data.step == 10


def test_a_file_still_being_written_holds_the_save_it_belongs_to(timeline: Timeline, ckpt: Path) -> None:
    # model.pt completes while optim.pt (large) is still growing: one save once both are whole
    w = started(timeline, ckpt)
    (ckpt / "model.pt").write_bytes(b"m")
    chunks = 0
    with open(ckpt / "optim.pt", "wb") as f:
        while w.unsettled < 3 and chunks < 400:  # three polls saw it grow: model.pt completed meanwhile
            f.write(b"o" * 10)
            f.flush()
            chunks += 1
            time.sleep(w.interval_s / 4)
    assert wait_until(lambda: len(saves(timeline)) == 1)
    w.stop()
    [save] = saves(timeline)
    assert save.data.files == 2 and save.data.size == 1 + 10 * chunks


def test_files_written_a_second_apart_are_two_saves(timeline: Timeline, ckpt: Path) -> None:
    w = started(timeline, ckpt)
    (ckpt / "epoch=0.ckpt").write_bytes(b"0")
    time.sleep(1.2)
    (ckpt / "epoch=1.ckpt").write_bytes(b"1")
    assert wait_until(lambda: len(saves(timeline)) == 2)
    w.stop()
    assert [(Path(e.data.path).name, e.data.files) for e in saves(timeline)] == [("epoch=0.ckpt", 1),
                                                                                 ("epoch=1.ckpt", 1)]


def test_saves_read_back_from_timeline_jsonl_with_their_files(timeline: Timeline, ckpt: Path,
                                                              tmp_path: Path) -> None:
    w = started(timeline, ckpt)
    (ckpt / "a.pt").write_bytes(b"a")
    (ckpt / "b.pt").write_bytes(b"b")
    assert wait_until(lambda: len(saves(timeline)) == 1)
    w.stop()
    timeline.close()
    read = read_timeline(tmp_path / "timeline.jsonl")
    assert read.errors == [] and [e.data.files for e in of(read.events, CheckpointEv.SAVED)] == [2]


# -- the step a save holds ------------------------------------------------------------

def labelled(timeline: Timeline, snap: Path, mtime: float) -> int | None:
    """The step the watcher gives a save written at ``mtime``."""
    w = started(timeline, snap)
    save_at(snap, mtime)
    assert wait_until(lambda: len(saves(timeline)) == 1)
    w.stop()
    return int(saves(timeline)[0].data.step)


def regex_step(step: int, written_after: float, t: float) -> Event:
    """A --progress-regex step: its line was not in the log at ``written_after`` and was read by ``t``."""
    return Event.make(ProgressEv.STEP, t, "node-0", Step(step=step, via="regex", written_after=written_after))


def test_a_step_line_printed_after_the_save_does_not_label_it(timeline: Timeline, ckpt: Path) -> None:
    # "epoch 5 done" came 0.12 s after the save, and the log was read in between: today's 0.15 s
    # slack put the save on epoch 5
    m = time.time() - 5
    timeline.add(regex_step(4, m - 1.1, m - 1.0))
    timeline.add(regex_step(5, m + 0.05, m + 0.12))
    assert labelled(timeline, ckpt / "snap.pt", m) == 4


def test_a_step_printed_before_the_save_and_read_after_it_labels_it(timeline: Timeline, ckpt: Path) -> None:
    # "epoch 5 done", the save, then "saved" in one read of the log: the step's time (the read) is
    # 0.3 s after the save, its lower bound before
    m = time.time() - 5
    timeline.add(regex_step(4, m - 1.1, m - 1.0))
    timeline.add(regex_step(5, m - 0.05, m + 0.3))
    assert labelled(timeline, ckpt / "snap.pt", m) == 5


def test_trainer_progress_steps_label_a_save_by_their_own_time(timeline: Timeline, ckpt: Path) -> None:
    m = time.time() - 5
    for step, t in ((6, m - 1.0), (7, m - 0.5), (8, m + 1.0)):
        timeline.add(Event.make(ProgressEv.STEP, t, "node-0", Step(step=step, rank=0)))
    assert labelled(timeline, ckpt / "snap.pt", m) == 7


# -- more than one writer --------------------------------------------------------------

def write_together(path: Path, writers: int) -> None:
    """``writers`` threads open ``path`` for writing, all of them before any writes, and close it."""
    both_open, both_wrote = threading.Barrier(writers), threading.Barrier(writers)

    def one(i: int) -> None:
        with open(path, "wb") as f:
            both_open.wait(5)
            f.write(bytes([i]) * 1000)
            both_wrote.wait(5)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)


@linux_only
def test_two_writers_of_one_path_at_once_are_said_once(timeline: Timeline, ckpt: Path) -> None:
    snap = ckpt / "snapshot.pt"
    snap.write_bytes(b"the last run's")
    w = started(timeline, snap)
    write_together(snap, 2)
    assert wait_until(lambda: len(races(timeline)) == 1)
    w.stop()
    [race] = races(timeline)
    assert race.node is None and race.data.path == str(snap)
    assert race.data.writes == 2 and race.data.bursts == 1 and race.data.first_at == race.data.last_at
    assert len(saves(timeline)) == 1  # and the file, when whole, is one save


@linux_only
def test_writers_racing_at_every_save_are_said_once_then_counted_as_the_run_ends(timeline: Timeline,
                                                                                ckpt: Path) -> None:
    snap = ckpt / "snapshot.pt"
    snap.write_bytes(b"the last run's")
    w = started(timeline, snap)
    for _ in range(3):
        write_together(snap, 2)
        time.sleep(0.5)
    assert [(e.data.writes, e.data.bursts) for e in races(timeline)] == [(2, 1)]  # not once a save
    w.stop()
    assert [(e.data.writes, e.data.bursts) for e in races(timeline)] == [(2, 1), (2, 3)]


@linux_only
def test_more_writers_at_once_than_said_are_said_again(timeline: Timeline, ckpt: Path) -> None:
    snap = ckpt / "snapshot.pt"
    snap.write_bytes(b"the last run's")
    w = started(timeline, snap)
    write_together(snap, 2)
    assert wait_until(lambda: len(races(timeline)) == 1)
    write_together(snap, 3)  # a third node joined
    assert wait_until(lambda: len(races(timeline)) == 2)
    w.stop()
    assert [(e.data.writes, e.data.bursts) for e in races(timeline)] == [(2, 1), (3, 2)]  # nothing new at the end


@linux_only
def test_two_writers_renaming_onto_one_path_at_once_are_two(timeline: Timeline, ckpt: Path) -> None:
    snap = ckpt / "snapshot.pt"
    w = started(timeline, snap)
    a, b = open(ckpt / "a.tmp", "wb"), open(ckpt / "b.tmp", "wb")  # noqa: SIM115 - closed just below
    a.write(b"a")
    b.write(b"b")
    a.close()
    os.replace(ckpt / "a.tmp", snap)
    b.close()
    os.replace(ckpt / "b.tmp", snap)
    assert wait_until(lambda: len(races(timeline)) == 1)
    w.stop()
    assert races(timeline)[0].data.writes == 2


@linux_only
def test_one_writer_saving_through_a_rename_every_half_second_is_one_writer(timeline: Timeline,
                                                                            ckpt: Path) -> None:
    snap = ckpt / "snapshot.pt"
    w = started(timeline, snap)
    for i in range(4):
        save_through_rename(snap, b"x" * (i + 1))
        time.sleep(0.5)
    w.stop()
    assert races(timeline) == [] and saves(timeline)


@linux_only
def test_one_writer_saving_twice_back_to_back_is_one_writer(timeline: Timeline, ckpt: Path) -> None:
    # the last epoch's save and the final one, milliseconds apart: near in time, never open at once
    snap = ckpt / "snapshot.pt"
    snap.write_bytes(b"epoch 8")
    w = started(timeline, snap)
    snap.write_bytes(b"epoch 9")
    snap.write_bytes(b"final")
    time.sleep(0.5)
    w.stop()
    assert races(timeline) == []


@linux_only
def test_two_writers_on_a_nodes_own_disk_are_that_nodes(timeline: Timeline, tmp_path: Path) -> None:
    disks = {"node-0": tmp_path / "node-0", "node-1": tmp_path / "node-1"}
    for folder in disks.values():
        folder.mkdir()
        (folder / "snapshot.pt").write_bytes(b"before")
    w = started(timeline, NodeRoots(lambda: disks, "snapshot.pt"))
    write_together(disks["node-1"] / "snapshot.pt", 2)  # two local ranks of node-1
    assert wait_until(lambda: len(races(timeline)) == 1)
    w.stop()
    assert [e.node for e in races(timeline)] == ["node-1"]


@linux_only
def test_behind_the_storage_layer_saves_and_writers_are_read_through_its_view(timeline: Timeline,
                                                                               tmp_path: Path) -> None:
    # the job writes under the mount; the watcher reads the folder behind it and names the job's paths
    mount, backing = tmp_path / "mount", tmp_path / "backing"
    (backing / "ckpt").mkdir(parents=True)
    (backing / "ckpt" / "snapshot.pt").write_bytes(b"before")
    w = CheckpointWatcher(timeline, mount / "ckpt", view=lambda p: backing / p.relative_to(mount))
    w.poll()
    w.start()
    write_together(backing / "ckpt" / "snapshot.pt", 2)
    (backing / "ckpt" / "optim.pt").write_bytes(b"o")
    assert wait_until(lambda: len(saves(timeline)) == 1 and len(races(timeline)) == 1)
    w.stop()
    assert saves(timeline)[0].data.path == str(mount / "ckpt") and saves(timeline)[0].data.files == 2
    assert races(timeline)[0].data.path == str(mount / "ckpt" / "snapshot.pt")


def test_the_watcher_lets_go_of_inotify_when_it_stops(timeline: Timeline, ckpt: Path) -> None:
    def inotify_fds() -> int:
        fds = Path("/proc/self/fd")
        if not fds.is_dir():
            return 0
        return sum(1 for fd in fds.iterdir() if "inotify" in _link(fd))

    gc.collect()  # an instance some earlier watcher left to be collected is not counted as ours
    before = inotify_fds()
    w = started(timeline, ckpt / "snapshot.pt")
    assert inotify_fds() == before + (1 if sys.platform.startswith("linux") else 0)
    w.stop()
    assert inotify_fds() == before


def _link(fd: Path) -> str:
    try:
        return os.readlink(fd)
    except OSError:
        return ""


def test_a_network_filesystem_is_not_watched_and_nothing_fails(tmp_path: Path) -> None:
    # the kernel sees no write another NFS client makes: counting there would say "one writer"
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"36 25 0:32 / / rw - ext4 /dev/root rw\n"
                         f"98 36 0:52 / {tmp_path} rw,relatime - nfs4 server:/export rw\n")
    assert filesystem(tmp_path / "ckpt", mountinfo) == "nfs4" and remote("nfs4") and remote("fuse.sshfs")
    assert filesystem(Path("/"), mountinfo) == "ext4" and not remote("ext4")
    writers = Writers(lambda name: name.endswith(".tmp"), mountinfo=mountinfo)
    snap = tmp_path / "snapshot.pt"
    snap.write_bytes(b"x")
    target = Target(None, snap, snap)
    assert writers.poll([target], time.time()) == []
    write_together(snap, 2)
    assert writers.poll([target], time.time(), final=True) == [] and writers.off is None
    writers.close()
