"""--compare-final on a user's script: its clean twin (elastic_chaos.hypotheses.final_script).

The unit tests need no job; the two real runs (slow) kill a node of a DDP script written without the
toolkit (tests/scripts/ddp_schedule.py: momentum and an LR schedule, saved through a rename) and
compare its final snapshot with its clean twin's: equal when it saves everything, diverged in the LR
when its scheduler is left out of the snapshot (a resumed run restarts the schedule)."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from elastic_chaos.analysis.final_state import CHECK
from elastic_chaos.hypotheses.final_script import final_save, twin_command
from elastic_chaos.spec import JobSpec

SCRIPT = Path(__file__).parent / "scripts" / "ddp_schedule.py"


def _refused(tmp_path, capsys, *flags: str) -> str:
    from elastic_chaos.cli.main import main
    code = main(["run", "kill-node", "--nodes", "2:2", "--compare-final", "--report-dir", str(tmp_path / "run"),
                 "--progress-regex", r"epoch (?P<step>\d+) done", "--unit", "epoch", "--steady-steps", "8",
                 "--checkpoint-every", "2", *flags, "--", str(SCRIPT)])
    assert code == 2
    assert not (tmp_path / "run" / "nodes").exists()   # refused before anything started
    return capsys.readouterr().err


def test_a_script_without_its_checkpoint_named_is_refused_before_it_starts(tmp_path, capsys):
    assert "name it with --checkpoint" in _refused(tmp_path, capsys)


def test_an_absolute_checkpoint_is_refused_as_the_twin_would_save_over_it(tmp_path, capsys):
    err = _refused(tmp_path, capsys, "--checkpoint", str(tmp_path / "snapshot.pt"))
    assert "the clean twin would save over the job's own" in err


def test_a_shrinking_script_job_is_refused_for_the_twin_cannot_replay_world_sizes(tmp_path, capsys):
    from elastic_chaos.cli.main import main
    code = main(["run", "kill-node", "--nodes", "1:2", "--no-replace", "--compare-final", "--checkpoint",
                 "snapshot.pt", "--steady-steps", "8", "--checkpoint-every", "2", "--report-dir", str(tmp_path / "run"),
                 "--", str(SCRIPT)])
    assert code == 2 and "drop --no-replace" in capsys.readouterr().err


def test_the_final_save_is_the_path_or_the_newest_match_of_a_glob(tmp_path):
    assert final_save(tmp_path, "snapshot.pt") is None
    (tmp_path / "snapshot.pt").write_bytes(b"x")
    assert final_save(tmp_path, "snapshot.pt") == tmp_path / "snapshot.pt"
    (tmp_path / "ckpt").mkdir()
    for i, name in enumerate(("epoch-10.pt", "epoch-2.pt", "epoch-9.pt")):
        (tmp_path / "ckpt" / name).write_bytes(b"x")
        os.utime(tmp_path / "ckpt" / name, ns=(time.time_ns(), (1_000 + i) * 10**9))
    assert final_save(tmp_path, "ckpt/epoch-*.pt") == tmp_path / "ckpt" / "epoch-9.pt"   # modified last
    assert final_save(tmp_path, "ckpt/none-*.pt") is None


def test_the_twin_is_the_same_script_and_arguments_at_the_full_world_standalone(tmp_path):
    job = JobSpec(nodes="2:2", nproc_per_node=2, script=(str(SCRIPT), "--epochs", "7"))
    cmd = twin_command(job, 4, python="py", out=tmp_path)
    assert cmd[:5] == ["py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4"]
    assert cmd[-3:] == [str(SCRIPT), "--epochs", "7"]


def _run(run_hypothesis, bug: str):
    return run_hypothesis("kill-node", compare_final=True, nodes="2:2", rdzv_preset="fast",
                          script=(str(SCRIPT), "--epochs", "60", "--bug", bug), checkpoint="snapshot.pt",
                          progress_regex=r"epoch (?P<step>\d+) done", resume_regex=r"resumed from epoch (?P<step>\d+)",
                          unit="epoch", steady_steps=8, checkpoint_every=2,
                          expect_failed={CHECK} if bug != "none" else None)


@pytest.mark.slow
def test_a_script_that_saves_everything_ends_as_its_clean_twin(run_hypothesis):
    run = _run(run_hypothesis, "none")
    check = next(c for c in run.verdict.checks if c.name == CHECK)
    assert check.ok and check.reason.startswith("final state: equal (bitwise"), check.reason
    assert "reference: the script's clean twin" in check.reason
    assert (run.report_dir / "final-state" / "twin-workdir" / "snapshot.pt").is_file()


@pytest.mark.slow
def test_a_script_whose_scheduler_is_not_saved_diverges_from_its_twin_in_the_lr(run_hypothesis):
    run = _run(run_hypothesis, "scheduler")
    check = next(c for c in run.verdict.checks if c.name == CHECK)
    assert not check.ok and check.reason.startswith("final state: diverged"), check.reason
    assert "param_groups" in check.reason and "lr" in check.reason, check.reason
