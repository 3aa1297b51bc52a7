"""Crash points: a writer is held at an exact point of its save, named by PID, killed there,
and the files are exactly what a crash at that point leaves.

While an op is held, the test does not look through the mount (``fs.direct`` instead): a
held rename holds the folder's lock in the kernel, and a lookup there would wait for it
like any other caller.

The writers are real processes saving the way elastic_chaos/trainer/checkpoint.py does (temporary file,
fsync, rename, fsync of the folder); real FUSE mounts (skipped with the reason where they
cannot be made, a failure under CI=true).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from storagefs_helpers import alive, mounted, require_fuse, within

from elastic_chaos.host import procs
from elastic_chaos.storagefs import CrashPoint, SavePoint, StorageFs
from elastic_chaos.storagefs.errors import PauseTimeout

pytestmark = pytest.mark.timeout(120)
SIZE = 1 << 20
WRITER = """
import os, sys, threading
folder, size = sys.argv[1], int(sys.argv[2])

def save():
    tmp = os.path.join(folder, ".ckpt.pt.tmp." + str(os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for _ in range(size // 65536):
        os.write(fd, b"c" * 65536)
    os.fsync(fd)
    os.close(fd)
    os.replace(tmp, os.path.join(folder, "ckpt.pt"))
    d = os.open(folder, os.O_RDONLY)
    os.fsync(d)
    os.close(d)

if sys.argv[3] == "thread":
    t = threading.Thread(target=save)
    t.start()
    t.join()
else:
    save()
print("saved", flush=True)
"""
TORCH_WRITER = """
import os, sys, torch
folder = sys.argv[1]
tmp = os.path.join(folder, ".ckpt.pt.tmp." + str(os.getpid()))
with open(tmp, "wb") as f:
    torch.save({"w": torch.ones(2048, 1024)}, f)
    f.flush()
    os.fsync(f.fileno())
os.replace(tmp, os.path.join(folder, "ckpt.pt"))
print("saved", flush=True)
"""


@pytest.fixture
def folder(tmp_path) -> Path:
    path = tmp_path / "ckpt"
    path.mkdir()
    return path


@pytest.fixture
def fs(folder, tmp_path) -> Iterator[StorageFs]:
    """A live storage mount over ``folder``, unmounted afterwards."""
    require_fuse()
    storage = StorageFs(folder, workdir=tmp_path / "storage", linger_s=5).mount()
    try:
        yield storage
    finally:
        storage.unmount()


@pytest.fixture
def writers() -> Iterator[list[subprocess.Popen[str]]]:
    """Writer processes a test starts; any left are SIGKILLed afterwards."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def start(writers: list[subprocess.Popen[str]], folder: Path, *, mode: str = "main",
          script: str = WRITER, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    isolated = ["-I", "-S"] if script is WRITER else []
    proc = subprocess.Popen([sys.executable, *isolated, "-c", textwrap.dedent(script), str(folder), str(SIZE), mode],
                            stdout=subprocess.PIPE, text=True, env=env)
    writers.append(proc)
    return proc


def files(folder: Path, pid: int) -> dict[str, int]:
    """The folder's files by size, the writer's temporary file called ``tmp``."""
    return {p.name.replace(f".ckpt.pt.tmp.{pid}", "tmp"): p.stat().st_size for p in folder.iterdir()}


@pytest.mark.parametrize(("point", "left"), [
    (SavePoint.AFTER_CREATE, {"tmp": 0}),
    (SavePoint.MID_WRITE, {"tmp": 300_000}),
    (SavePoint.BEFORE_FSYNC, {"tmp": SIZE}),
    (SavePoint.BEFORE_RENAME, {"tmp": SIZE}),
    (SavePoint.AFTER_RENAME, {"ckpt.pt": SIZE}),
])
def test_a_writer_killed_at_a_point_of_its_save_leaves_exactly_that(fs, folder, writers, point, left):
    fs.set_rule(CrashPoint(point, path=".ckpt.pt.tmp.*", after_bytes=300_000), name="aim")
    writer = start(writers, folder)
    paused = fs.wait_pause(60)
    assert (paused.point, paused.pid, paused.state) == (point, writer.pid, "held")
    assert paused.path == f".ckpt.pt.tmp.{writer.pid}"
    assert paused.dst == ("ckpt.pt" if point in (SavePoint.BEFORE_RENAME, SavePoint.AFTER_RENAME) else None)
    assert paused.bytes == (300_000 if point is SavePoint.MID_WRITE else None)
    assert writer.poll() is None                          # held: the save goes no further
    os.kill(writer.pid, signal.SIGKILL)                   # the node dies while its op is held
    assert writer.wait(10) == -signal.SIGKILL             # and can die: the held op is answered
    assert fs.release(paused.id) == []                    # nothing left to release
    assert [p.state for p in fs.pauses()] == ["caller-killed"]
    assert files(folder, writer.pid) == left
    assert "aim" not in fs.rules()                        # one-shot
    resumed = [r for r in fs.ops() if r.op == "resume"]
    assert [(r.pause, r.outcome, r.pid) for r in resumed] == [(paused.id, "caller-killed", writer.pid)]


def test_a_node_killed_the_local_platforms_way_while_its_save_is_held_dies_at_once(fs, folder, writers):
    tag = f"storagefs-test/node-{os.getpid()}"
    fs.set_rule(CrashPoint(SavePoint.BEFORE_RENAME))
    writer = start(writers, folder, env={**os.environ, procs.TAG_VAR: tag})
    paused = fs.wait_pause(60)
    assert paused.pid == writer.pid
    started = time.monotonic()
    assert procs.kill_tree(tag, timeout_s=10) == {writer.pid}   # SIGSTOP the node, then SIGKILL it
    assert time.monotonic() - started < 5
    assert writer.wait(10) == -signal.SIGKILL
    assert [p.state for p in fs.pauses()] == ["caller-killed"]
    assert files(folder, writer.pid) == {"tmp": SIZE}


def test_a_released_pause_lets_the_save_finish_and_names_the_process_of_a_writer_thread(fs, folder, writers):
    fs.set_rule(CrashPoint(SavePoint.BEFORE_RENAME))
    writer = start(writers, folder, mode="thread")
    paused = fs.wait_pause(60)
    assert paused.pid == writer.pid and paused.tid != writer.pid  # the save runs in a thread of it
    assert not within(lambda: writer.poll() is not None, 0.3)
    # not through the mount: the held rename holds the folder's lock, as on a hung server
    assert sorted(os.listdir(fs.direct)) == [f".ckpt.pt.tmp.{writer.pid}"]
    assert [p.id for p in fs.release(paused.id)] == [paused.id]
    assert writer.communicate(timeout=30)[0] == "saved\n"
    assert files(folder, writer.pid) == {"ckpt.pt": SIZE}
    assert [(r.op, r.outcome) for r in fs.ops() if r.op in ("pause", "resume")] == [("pause", None),
                                                                                     ("resume", "released")]


def test_a_torch_save_killed_mid_write_leaves_a_partial_file_that_does_not_load(fs, folder, writers):
    torch = pytest.importorskip("torch")
    fs.set_rule(CrashPoint(SavePoint.MID_WRITE, path=".ckpt.pt.tmp.*", after_bytes=2_000_000))
    writer = start(writers, folder, script=TORCH_WRITER)
    paused = fs.wait_pause(120)
    assert paused.pid == writer.pid and paused.bytes == 2_000_000
    writer.kill()
    assert writer.wait(10) == -signal.SIGKILL
    partial = folder / f".ckpt.pt.tmp.{writer.pid}"
    assert partial.stat().st_size == 2_000_000 and not (folder / "ckpt.pt").exists()
    with pytest.raises(RuntimeError):
        torch.load(partial)


def test_clearing_a_crash_point_that_holds_an_op_lets_it_go_on(fs, folder, writers):
    fs.set_rule(CrashPoint(SavePoint.AFTER_RENAME), name="aim")
    writer = start(writers, folder)
    fs.wait_pause(60)
    assert fs.clear_rule("aim") == []                     # spent when it fired; its pause is released
    assert writer.communicate(timeout=30)[0] == "saved\n"
    assert [p.state for p in fs.pauses()] == ["released"]


def test_unmounting_lets_a_held_op_go_on_and_the_save_completes(fs, folder, writers):
    fs.set_rule(CrashPoint(SavePoint.BEFORE_FSYNC))
    writer = start(writers, folder)
    fs.wait_pause(60)
    fs.unmount()
    assert not mounted(folder)
    assert writer.communicate(timeout=30)[0] == "saved\n"
    assert files(folder, writer.pid) == {"ckpt.pt": SIZE}
    assert fs.daemon_pid is None


def test_waiting_for_a_pause_that_never_comes_is_bounded(fs, folder):
    fs.set_rule(CrashPoint(SavePoint.BEFORE_RENAME, path="never-*"))
    (folder / "other").write_text("x")
    with pytest.raises(PauseTimeout, match="crash point"):
        fs.wait_pause(0.3)


def test_a_held_op_of_a_process_that_dies_otherwise_does_not_hold_the_daemon(fs, folder, writers):
    fs.set_rule(CrashPoint(SavePoint.AFTER_CREATE))
    writer = start(writers, folder)
    paused = fs.wait_pause(60)
    pid = fs.daemon_pid
    assert pid is not None
    writer.terminate()                       # SIGTERM, no handler: fatal, like SIGKILL
    assert writer.wait(10) == -signal.SIGTERM
    assert within(lambda: [p.state for p in fs.pauses()] == ["caller-killed"], 5)
    assert alive(pid) and paused.id == 1


PRUNER = """
import os, sys
folder = sys.argv[1]
for name in ("a.distcp", ".metadata", "b.distcp"):   # a prune that removes shards first
    os.unlink(os.path.join(folder, "old", name))
print("pruned", flush=True)
"""


def test_a_pruner_killed_before_an_unlink_leaves_that_file_and_the_ones_after_it(fs, folder, writers):
    """The before-unlink point (kill-at-save-point's prune points over DCP saves): the op held is never
    done, the files unlinked before it are gone, those after it stay."""
    (folder / "old").mkdir()
    for name in ("a.distcp", ".metadata", "b.distcp"):
        (folder / "old" / name).write_bytes(b"x")
    fs.set_rule(CrashPoint(SavePoint.BEFORE_UNLINK, path="old/.metadata"), name="aim")
    pruner = start(writers, folder, script=PRUNER)
    paused = fs.wait_pause(60)
    assert (paused.point, paused.path, paused.pid) == (SavePoint.BEFORE_UNLINK, "old/.metadata", pruner.pid)
    os.kill(pruner.pid, signal.SIGKILL)
    assert pruner.wait(10) == -signal.SIGKILL
    assert fs.release(paused.id) == []
    assert sorted(p.name for p in (folder / "old").iterdir()) == [".metadata", "b.distcp"]
