"""The reference trainer's DCP folders on disk (elastic_chaos.trainer.dcp_checkpoint): which folder a
restart resumes from, the ``latest`` pointer, and pruning that never removes what the pointer names
nor anything newer. Folders are written by the test; the trainer's real saves are in test_dcp_runs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import reference_runs

from elastic_chaos.analysis.final_state import compare_final
from elastic_chaos.trainer.dcp_checkpoint import (
    METADATA,
    POINTER,
    list_folders,
    prune,
    read_pointer,
    resume_candidates,
    step_folder,
    write_pointer,
)


def folder(directory: Path, step: int, *, complete: bool = True) -> Path:
    f = step_folder(directory, step)
    f.mkdir(parents=True)
    (f / "__0_0.distcp").write_bytes(b"s")
    if complete:
        (f / METADATA).write_bytes(b"m")
    return f


def steps(directory: Path) -> list[int]:
    return [int(p.name.split("-")[1]) for p in list_folders(directory)]


def test_a_restart_resumes_from_the_folder_latest_names(tmp_path: Path) -> None:
    folder(tmp_path, 20)
    folder(tmp_path, 40)
    folder(tmp_path, 60)   # complete, but the pointer was not moved to it (killed in between)
    write_pointer(tmp_path, step_folder(tmp_path, 40))
    assert [p.name for p in resume_candidates(tmp_path)] == ["step-00000040", "step-00000060", "step-00000020"]


@pytest.mark.parametrize("pointer", [None, "step-00000060", "garbage\x00"], ids=["none", "partial", "garbage"])
def test_without_a_usable_pointer_the_newest_complete_folder_wins(tmp_path: Path, pointer: str | None) -> None:
    folder(tmp_path, 20)
    folder(tmp_path, 40)
    folder(tmp_path, 60, complete=False)   # shards, no .metadata: a partial save
    if pointer is not None:
        (tmp_path / POINTER).write_text(pointer)
    assert [p.name for p in resume_candidates(tmp_path)] == ["step-00000040", "step-00000020"]


def test_the_pointer_is_replaced_atomically_and_never_moves_back(tmp_path: Path) -> None:
    folder(tmp_path, 20)
    folder(tmp_path, 40)
    write_pointer(tmp_path, step_folder(tmp_path, 40))
    write_pointer(tmp_path, step_folder(tmp_path, 20))   # a late emergency save of an older step
    assert read_pointer(tmp_path) == step_folder(tmp_path, 40)
    assert sorted(p.name for p in tmp_path.iterdir()) == [POINTER, "step-00000020", "step-00000040"]


def test_pruning_keeps_n_at_or_below_the_pointer_and_everything_newer(tmp_path: Path) -> None:
    for step in (20, 40, 60, 80, 100):
        folder(tmp_path, step)
    folder(tmp_path, 30, complete=False)    # an interrupted save below the pointer: removed
    folder(tmp_path, 120, complete=False)   # a save in flight above it: kept
    write_pointer(tmp_path, step_folder(tmp_path, 80))
    prune(tmp_path, keep=2)
    assert steps(tmp_path) == [120, 100, 80, 60]


def test_pruning_without_a_complete_pointed_save_removes_nothing(tmp_path: Path) -> None:
    for step in (20, 40, 60):
        folder(tmp_path, step)
    prune(tmp_path, keep=1)
    folder(tmp_path, 80, complete=False)
    write_pointer(tmp_path, step_folder(tmp_path, 80))   # a pointer that landed before its save was durable
    prune(tmp_path, keep=1)
    assert steps(tmp_path) == [80, 60, 40, 20]


def train(folder: Path, max_steps: int, *args: str) -> None:
    """The reference trainer in DCP mode at world size 2 (torchrun --standalone), saving every 10."""
    reference_runs.train(folder, max_steps, "--checkpoint-format", "dcp", *args, every=10)


@pytest.mark.slow
def test_a_clean_dcp_run_and_an_async_run_resumed_halfway_end_bitwise_equal(tmp_path: Path) -> None:
    train(tmp_path / "a", 40)
    train(tmp_path / "b", 20, "--async-save")
    train(tmp_path / "b", 40, "--async-save")
    state = compare_final(step_folder(tmp_path / "a", 40), step_folder(tmp_path / "b", 40))
    assert state.equal, state.describe()
    assert read_pointer(tmp_path / "b") == step_folder(tmp_path / "b", 40)
    assert steps(tmp_path / "b") == [40, 30, 20]   # --keep-last-n 3 (the default)


def test_the_comparer_takes_the_save_latest_names_from_a_folder_of_dcp_saves(tmp_path: Path) -> None:
    from elastic_chaos.trainer.compare_state import resolve
    folder(tmp_path, 20)
    folder(tmp_path, 40)
    folder(tmp_path, 60, complete=False)
    write_pointer(tmp_path, step_folder(tmp_path, 20))   # a rollback: latest names the older save
    assert resolve(tmp_path) == step_folder(tmp_path, 20)
    (tmp_path / POINTER).unlink()
    assert resolve(tmp_path) == step_folder(tmp_path, 40)


def test_the_job_option_passes_the_format_and_compare_final_looks_for_its_step_folder(tmp_path: Path) -> None:
    from elastic_chaos.errors import SpecError
    from elastic_chaos.hypotheses.final import final_save
    from elastic_chaos.spec import CheckpointFormat, JobSpec
    job = JobSpec(checkpoint_format=CheckpointFormat.DCP)
    assert job.trainer_command_args()[-2:] == ["--checkpoint-format", "dcp"]
    assert final_save(tmp_path, 100, job) == tmp_path / "step-00000100"
    assert final_save(tmp_path, 100, JobSpec(trainer_args=("--checkpoint-format=dcp",))) == tmp_path / "step-00000100"
    assert final_save(tmp_path, 100, JobSpec()) == tmp_path / "ckpt-00000100.pt"
    with pytest.raises(SpecError, match="reference trainer's"):
        JobSpec(checkpoint_format=CheckpointFormat.DCP, script=("train.py",))
    assert JobSpec(checkpoint_format=CheckpointFormat.DCP, async_save=True).trainer_command_args()[-3:] == \
        ["--checkpoint-format", "dcp", "--async-save"]
    with pytest.raises(SpecError, match="give checkpoint_format dcp"):
        JobSpec(async_save=True)


def test_a_failed_load_is_reported_in_one_line_naming_the_root_error() -> None:
    # DCP gathers every rank's failure into a CheckpointException: a BaseException (restore catches it
    # too, or a damaged save would crash the job instead of being skipped) whose text holds each
    # rank's traceback; the checkpoint_corrupt line keeps its first line and the root error
    from torch.distributed.checkpoint.api import CheckpointException, _wrap_exception

    from elastic_chaos.trainer.dcp_checkpoint import _why
    assert not issubclass(CheckpointException, Exception)
    try:
        raise FileNotFoundError("No such file or directory: 'step-00000060/__1_0.distcp'")
    except FileNotFoundError as exc:
        wrapped = _wrap_exception(exc)
    said = _why(CheckpointException("read_data", {0: wrapped, 1: wrapped}))
    assert "\n" not in said and said.startswith("CheckpointException: ")
    assert said.endswith("FileNotFoundError: No such file or directory: 'step-00000060/__1_0.distcp'")
    assert _why(ValueError("bad")) == "ValueError: bad"


def test_a_killed_writers_pointer_temporary_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    """A coordinator killed between writing the pointer's temporary and its rename (kill-at-save-point's
    pointer-before-rename) leaves ``.latest.tmp.<place>.<pid>``: the next restart on that host removes it."""
    from elastic_chaos.trainer.checkpoint import writer_place
    from elastic_chaos.trainer.dcp_checkpoint import remove_abandoned_temporaries

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead = tmp_path / f".{POINTER}.tmp.{writer_place()}.{int(gone.stdout)}"
    alive = tmp_path / f".{POINTER}.tmp.{writer_place()}.{os.getpid()}"
    elsewhere = tmp_path / f".{POINTER}.tmp.another-host.{int(gone.stdout)}"
    for f in (dead, alive, elsewhere):
        f.write_text("step-00000040\n")
    folder(tmp_path, 40)
    remove_abandoned_temporaries(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, elsewhere.name, "step-00000040"])


def test_a_python_without_numpy_is_told_at_the_start_that_dcp_needs_it() -> None:
    """DCP gathers each save's plan through numpy: the local cluster's image lacked it and every save
    failed steps into the run ("Numpy is not available"). The trainer now says so before it trains."""
    from elastic_chaos.trainer.dcp_checkpoint import missing_requirement
    assert missing_requirement() is None   # this venv has numpy
    code = ("import sys; sys.modules['numpy'] = None; from elastic_chaos.trainer.dcp_checkpoint import "
            "missing_requirement; print(missing_requirement())")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert "needs numpy in the nodes' python" in out and "pip install numpy" in out
