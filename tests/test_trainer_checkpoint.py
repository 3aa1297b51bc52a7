"""Atomic checkpoints: resume always loads the newest COMPLETE checkpoint."""
from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest
import torch

from trainer import checkpoint, progress


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
