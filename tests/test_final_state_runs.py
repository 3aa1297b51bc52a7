"""The final-state oracle on real jobs (slow): the reference trainer is deterministic on CPU/gloo, a
job resumed after a hard node loss ends bitwise equal to a clean run, and a resume bug is named."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from elastic_chaos.analysis.final_state import CHECK, StateClass, compare_final

pytestmark = pytest.mark.slow


def train(folder: Path, max_steps: int, *args: str) -> None:
    """The reference trainer at world size 2 (torchrun --standalone), to ``max_steps``, saving every 20."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           f"--log-dir={folder.parent / (folder.name + '.torchelastic')}",   # not the system temp folder
           "-m", "elastic_chaos.trainer.train", "--max-steps", str(max_steps), "--checkpoint-every", "20",
           "--step-time", "0", "--spot-notice", "off", "--checkpoint-dir", str(folder), *args]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_two_clean_runs_and_a_resumed_run_of_one_seed_end_bitwise_equal(tmp_path):
    train(tmp_path / "a", 60)
    train(tmp_path / "b", 60)
    train(tmp_path / "c", 30)      # stops past its save at 20: the next start resumes from there
    train(tmp_path / "c", 60)
    twice = compare_final(tmp_path / "a", tmp_path / "b")
    resumed = compare_final(tmp_path / "a", tmp_path / "c")
    assert twice.equal and resumed.equal, (twice.describe(), resumed.describe())
    assert twice.step_a == twice.step_b == 60
    # the checkpoint holds what a resume needs: weights, optimizer, scheduler, RNG, data position
    classes = set(compare_final(tmp_path / "a" / "ckpt-00000040.pt", tmp_path / "a").classes)
    assert {StateClass.MODEL, StateClass.OPTIMIZER, StateClass.LR_SCHEDULER, StateClass.DATA_POSITION} <= classes


def test_a_resume_that_forgets_the_scheduler_diverges_in_the_lr(tmp_path):
    train(tmp_path / "a", 60)
    train(tmp_path / "c", 30, "--forget", "sched")
    train(tmp_path / "c", 60, "--forget", "sched")
    state = compare_final(tmp_path / "a", tmp_path / "c")
    assert not state.equal and state.first is not None
    assert state.first.state is StateClass.LR_SCHEDULER and state.first.path == "optim.param_groups.0.lr"


@pytest.mark.parametrize("name", ["kill-node", "worker-crash", "spot-interruption", "kill-during-checkpoint"])
def test_a_recovery_at_the_same_size_ends_in_the_clean_runs_final_state(run_hypothesis, name):
    run = run_hypothesis(name, compare_final=True)
    check = next(c for c in run.verdict.checks if c.name == CHECK)
    assert check.ok and check.reason.startswith("final state: equal (bitwise")
    assert "final state: equal" in (run.report.folder / "summary.md").read_text()


def test_kill_node_compare_final_names_a_forgotten_scheduler(run_hypothesis):
    run = run_hypothesis("kill-node", compare_final=True, trainer_args=("--forget", "sched"),
                         expect_failed={CHECK})
    check = next(c for c in run.verdict.checks if c.name == CHECK)
    assert not check.ok and "LR scheduler diverged at optim.param_groups.0.lr" in check.reason
    assert "the LR scheduler's state is not saved or not restored" in check.reason
