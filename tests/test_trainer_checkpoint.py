"""Atomic checkpoints: resume always loads the newest COMPLETE checkpoint."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import torch

from elastic_chaos.trainer import checkpoint, progress


@pytest.fixture(autouse=True)
def quiet_progress(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(progress, "_stream", out)
    return out


def events(out: io.StringIO) -> list[dict]:
    return [json.loads(line[len(progress.PREFIX):]) for line in out.getvalue().splitlines()]


def test_save_then_load_newest(tmp_path):
    checkpoint.save(tmp_path, 20, {"w": torch.ones(2)})
    checkpoint.save(tmp_path, 40, {"w": torch.full((2,), 2.0)})
    loaded = checkpoint.load_newest(tmp_path)
    assert loaded is not None and loaded.step == 40
    assert torch.equal(loaded.state["w"], torch.full((2,), 2.0))


def test_a_fresh_directory_has_nothing_to_resume(tmp_path):
    assert checkpoint.load_newest(tmp_path / "empty") is None


def test_a_temporary_file_of_an_interrupted_save_is_never_loaded(tmp_path):
    checkpoint.save(tmp_path, 20, {"w": torch.ones(2)})
    (tmp_path / ".ckpt-00000040.pt.tmp.999").write_bytes(b"half a checkpoint")
    loaded = checkpoint.load_newest(tmp_path)
    assert loaded is not None and loaded.step == 20


def test_a_kill_before_the_rename_leaves_the_previous_checkpoint(tmp_path):
    checkpoint.save(tmp_path, 20, {"w": torch.ones(2)})

    class Killed(Exception):
        pass

    def die() -> None:
        raise Killed

    with pytest.raises(Killed):
        checkpoint.save(tmp_path, 40, {"w": torch.zeros(2)}, before_rename=die)
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == ["ckpt-00000020.pt"]
    assert checkpoint.load_newest(tmp_path).step == 20


def test_a_corrupt_newest_checkpoint_is_reported_and_skipped(tmp_path, quiet_progress):
    checkpoint.save(tmp_path, 20, {"w": torch.ones(2)})
    checkpoint.checkpoint_path(tmp_path, 40).write_bytes(b"\x00garbage")
    loaded = checkpoint.load_newest(tmp_path)
    assert loaded is not None and loaded.step == 20
    corrupt = [e for e in events(quiet_progress) if e["ev"] == "checkpoint_corrupt"]
    assert len(corrupt) == 1 and corrupt[0]["path"].endswith("ckpt-00000040.pt")


def test_a_foreign_file_with_a_checkpoint_name_is_skipped(tmp_path):
    torch.save({"something": "else"}, checkpoint.checkpoint_path(tmp_path, 60))
    assert checkpoint.load_newest(tmp_path) is None


def test_only_the_newest_few_are_kept(tmp_path):
    for s in (10, 20, 30, 40):
        checkpoint.save(tmp_path, s, {}, keep=2)
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == ["ckpt-00000040.pt", "ckpt-00000030.pt"]


def test_save_reports_started_then_saved(tmp_path, quiet_progress):
    checkpoint.save(tmp_path, 20, {})
    kinds = [e["ev"] for e in events(quiet_progress)]
    assert kinds == ["checkpoint_started", "checkpoint_saved"]


def test_progress_lines_carry_identity_from_torchrun_env(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    out = io.StringIO()
    monkeypatch.setattr(progress, "_stream", None)
    with redirect_stdout(out):
        progress.report_step(7, epoch=0, samples=[[0, 16]])
    (line,) = out.getvalue().splitlines()
    assert line.startswith(progress.PREFIX)
    ev = json.loads(line[len(progress.PREFIX):])
    assert (ev["ev"], ev["step"], ev["rank"], ev["world_size"], ev["restart_count"]) == ("step", 7, 3, 4, 2)


# --- the directory is tidied: stale, corrupt and abandoned files -------------

def save_earlier_run(path, step):
    """A complete checkpoint as an earlier run in the same directory left it."""
    torch.save({"format_version": checkpoint.FORMAT_VERSION, "step": step, "w": torch.zeros(2)}, path)


def test_a_save_below_stale_higher_steps_keeps_what_it_wrote(tmp_path):
    save_earlier_run(checkpoint.checkpoint_path(tmp_path, 97), 97)
    for step in (98, 99):
        checkpoint.checkpoint_path(tmp_path, step).write_bytes(b"\x00garbage")
    saved = checkpoint.save(tmp_path, 20, {"w": torch.ones(2)})
    assert saved.exists()
    loaded = checkpoint.load_newest(tmp_path)
    assert loaded is not None and loaded.step == 20


def test_stale_higher_steps_are_removed_and_reported(tmp_path, quiet_progress):
    for step in (97, 98, 99):
        save_earlier_run(checkpoint.checkpoint_path(tmp_path, step), step)
    checkpoint.save(tmp_path, 20, {})
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == ["ckpt-00000020.pt"]
    removed = [e["path"] for e in events(quiet_progress) if e["ev"] == "checkpoint_removed"]
    assert sorted(removed) == [str(checkpoint.checkpoint_path(tmp_path, s)) for s in (97, 98, 99)]


def test_a_save_after_a_restore_removes_only_the_higher_steps_the_restore_skipped(tmp_path):
    checkpoint.save(tmp_path, 10, {})
    for step in (97, 98):
        checkpoint.checkpoint_path(tmp_path, step).write_bytes(b"\x00garbage")
    assert checkpoint.load_newest(tmp_path).step == 10
    save_earlier_run(checkpoint.checkpoint_path(tmp_path, 99), 99)  # another world, after the restore
    checkpoint.save(tmp_path, 20, {})
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == ["ckpt-00000099.pt", "ckpt-00000020.pt",
                                                                      "ckpt-00000010.pt"]


def test_corrupt_checkpoints_never_count_towards_keep(tmp_path):
    checkpoint.save(tmp_path, 10, {}, keep=3)
    checkpoint.save(tmp_path, 20, {}, keep=3)
    checkpoint.checkpoint_path(tmp_path, 25).write_bytes(b"\x00garbage")
    torch.save({"something": "else"}, checkpoint.checkpoint_path(tmp_path, 26))
    checkpoint.save(tmp_path, 30, {}, keep=3)
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == ["ckpt-00000030.pt", "ckpt-00000020.pt",
                                                                      "ckpt-00000010.pt"]


def test_a_corrupt_checkpoint_a_save_removes_is_reported(tmp_path, quiet_progress):
    checkpoint.save(tmp_path, 10, {})
    bad = checkpoint.checkpoint_path(tmp_path, 15)
    bad.write_bytes(b"\x00garbage")
    checkpoint.save(tmp_path, 20, {})
    seen = [(e["ev"], e["path"]) for e in events(quiet_progress)
            if e["ev"] in ("checkpoint_corrupt", "checkpoint_removed")]
    assert seen == [("checkpoint_corrupt", str(bad)), ("checkpoint_removed", str(bad))]
    assert not bad.exists()


def test_where_mmap_fails_good_checkpoints_still_count_towards_keep(tmp_path, monkeypatch):
    # A guard, not a finding: pruning checks kept files with torch.load(mmap=True);
    # a filesystem that cannot map files must not make good checkpoints look corrupt.
    real_load = torch.load

    def load_without_mmap(*args, mmap=None, **kwargs):
        if mmap:
            raise OSError(19, "No such device (mmap)")
        return real_load(*args, **kwargs)

    for step in (10, 20):
        checkpoint.save(tmp_path, step, {})
    monkeypatch.setattr(torch, "load", load_without_mmap)
    checkpoint.save(tmp_path, 30, {})
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == ["ckpt-00000030.pt", "ckpt-00000020.pt",
                                                                      "ckpt-00000010.pt"]


# --- temporaries of interrupted saves ---------------------------------------

ROOT = Path(__file__).resolve().parents[1]
WRITER = """
import sys, time
from pathlib import Path
import torch
from elastic_chaos.trainer import checkpoint
d, step, tag, value = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
def hold():  # the temporary is complete and durable; wait to be let go
    (d.parent / f"{tag}.ready").touch()
    while not (d.parent / f"{tag}.go").exists():
        time.sleep(0.01)
checkpoint.save(d, step, {"w": torch.full((100_000,), value), "tag": tag}, before_rename=hold)
"""


class Writer:
    """A process saving a checkpoint, held between its durable temporary and its rename."""

    def __init__(self, directory: Path, step: int, tag: str, value: float, prefix: list[str]) -> None:
        self.directory, self.tag = directory, tag
        self.proc = subprocess.Popen([*prefix, sys.executable, "-c", WRITER, str(directory), str(step), tag,
                                      str(value)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not (self.directory.parent / f"{self.tag}.ready").exists():
            if self.proc.poll() is not None:
                pytest.fail(f"writer {self.tag} exited {self.proc.returncode}: {self.proc.stderr.read().decode()}")
            assert time.monotonic() < deadline, f"writer {self.tag} never reached its rename"
            time.sleep(0.02)

    def release(self) -> None:
        """Let the save finish; it must succeed."""
        (self.directory.parent / f"{self.tag}.go").touch()
        rc = self.proc.wait(timeout=60)
        assert rc == 0, f"writer {self.tag} failed: {self.proc.stderr.read().decode()}"

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=60)


@pytest.fixture
def writers():
    """Starts Writer processes (``prefix`` runs them under e.g. unshare); stops each by PID."""
    started: list[Writer] = []

    def start(directory: Path, step: int, tag: str, value: float = 1.0, prefix: list[str] | None = None) -> Writer:
        w = Writer(directory, step, tag, value, prefix or [])
        started.append(w)
        return w

    yield start
    for w in started:
        if w.proc.poll() is None:
            w.kill()
        w.proc.stderr.close()


def temporaries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".tmp." in p.name)


def test_a_save_removes_a_dead_writers_temporary_and_keeps_a_live_writers(tmp_path, writers):
    d = tmp_path / "ckpt"
    dead, live = writers(d, 20, "dead"), writers(d, 20, "live", 2.0)
    dead.wait_ready()
    live.wait_ready()
    dead.kill()
    assert len(temporaries(d)) == 2
    checkpoint.save(d, 20, {"w": torch.ones(2)})
    assert [name.rsplit(".", 1)[1] for name in temporaries(d)] == [str(live.proc.pid)]
    live.release()
    assert temporaries(d) == []
    loaded = checkpoint.load_newest(d)
    assert loaded is not None and loaded.state["tag"] == "live"


def test_a_restart_removes_a_dead_writers_temporary(tmp_path, writers):
    d = tmp_path / "ckpt"
    dead = writers(d, 40, "dead")
    dead.wait_ready()
    dead.kill()
    assert checkpoint.load_newest(d) is None
    assert temporaries(d) == []


@pytest.mark.parametrize("name", [".ckpt-{step:08d}.pt.tmp.{pid}",
                                  ".ckpt-{step:08d}.pt.tmp.elsewhere.4026531836.{pid}"],
                         ids=["old-style-name", "another-host"])
def test_a_temporary_whose_writer_cannot_be_asked_goes_only_when_abandoned(tmp_path, name):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its PID names no process here, but the name does not say "here"
    fresh = tmp_path / name.format(step=40, pid=gone.pid)
    old = tmp_path / name.format(step=60, pid=gone.pid)
    for p in (fresh, old):
        p.write_bytes(b"half a checkpoint")
    a_week_ago = time.time() - 7 * 24 * 3600
    os.utime(old, (a_week_ago, a_week_ago))
    checkpoint.load_newest(tmp_path)
    assert temporaries(tmp_path) == [fresh.name]


def unshare_pid_namespace() -> list[str]:
    """A command prefix running its command as PID 1 of a new PID namespace, or a skip."""
    prefix = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--"]
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) (util-linux) to give two writers the same PID")
    probe = subprocess.run([*prefix, sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True)
    if probe.returncode != 0 or probe.stdout.strip() != "1":
        pytest.skip(f"unprivileged PID namespaces are not available here: {probe.stderr.strip()}")
    return prefix


def test_same_step_saves_by_writers_with_the_same_pid_elsewhere_end_in_one_complete_file(tmp_path, writers):
    # Two containers (or hosts on a shared volume) give their workers the same
    # PIDs; here both writers are PID 1 of their own PID namespace.
    prefix = unshare_pid_namespace()
    d = tmp_path / "ckpt"
    first, second = writers(d, 20, "first", 1.0, prefix), writers(d, 20, "second", 2.0, prefix)
    first.wait_ready()
    second.wait_ready()
    first.release()  # renamed and pruned while the second still holds its temporary
    second.release()
    loaded = checkpoint.load_newest(d)
    assert loaded is not None and loaded.step == 20 and loaded.state["tag"] == "second"
    assert torch.equal(loaded.state["w"], torch.full((100_000,), 2.0))
    assert temporaries(d) == []
