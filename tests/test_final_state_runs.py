"""The final-state oracle on real jobs (slow): the reference trainer is deterministic on CPU/gloo, a
job resumed after a hard node loss ends bitwise equal to a clean run, a job that shrank ends bitwise equal
to a clean replay of its schedule (and not to a clean run at full size), and a resume bug is named."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import reference_runs

from elastic_chaos.analysis.final_state import CHECK, StateClass, compare_final
from elastic_chaos.analysis.schedule import Leg
from elastic_chaos.hypotheses.final import train_legs

pytestmark = pytest.mark.slow


def train(folder: Path, max_steps: int, *args: str) -> None:
    """The reference trainer at world size 2 (torchrun --standalone), to ``max_steps``, saving every 20."""
    reference_runs.train(folder, max_steps, *args, every=20)


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


def replay(out: Path, *legs: Leg) -> Path:
    """``legs`` trained by the final-state check's own reference runner (elastic_chaos.hypotheses.final)."""
    return train_legs(legs, python=sys.executable, args=[], env=dict(os.environ), out=out, tag=f"test/{out.name}",
                      every=20, save_of=lambda folder, step: folder / f"ckpt-{step:08d}.pt")


def test_a_job_that_shrank_ends_bitwise_equal_to_a_replay_of_its_schedule_and_not_to_a_clean_run(tmp_path):
    # the job: world 2 past step 20, lost before its save of 40 was whole; world 1 resumes from 20 to 60
    # (trained by the hang-proof runner: a gloo worker can hang on its way out, and the runner stops it)
    replay(tmp_path / "job", Leg(2, 0, 40)).unlink()
    job_saves = replay(tmp_path / "job", Leg(1, 20, 60)).parent
    # two independent runs of the changed schedule, one with steps rolled back: deterministic across the resize
    replayed = replay(tmp_path / "replay", Leg(2, 0, 20), Leg(1, 20, 60))
    full_size = replay(tmp_path / "full", Leg(2, 0, 60))   # a reference that ignores the schedule
    assert replayed == tmp_path / "replay" / "reference-checkpoints" / "ckpt-00000060.pt"
    job, ignored = compare_final(replayed, job_saves), compare_final(full_size, job_saves)
    assert job.equal, job.describe()
    assert not ignored.equal and ignored.first is not None and ignored.first.state is StateClass.DATA_POSITION
    log = (tmp_path / "replay" / "reference.log").read_text()
    assert "leg 2 of 2: world size 1 from the save of step 20 to step 60" in log


def test_kill_node_without_a_replacement_ends_equal_to_a_replay_of_its_schedule(run_hypothesis):
    run = run_hypothesis("kill-node", compare_final=True, replace_lost_nodes=False)
    check = next(c for c in run.verdict.checks if c.name == CHECK)
    # the schedule replayed twice: on CPU/gloo the two replays are bitwise equal, so the comparison is bitwise
    assert check.ok and check.reason.startswith("final state: equal (bitwise: two clean replays of the schedule "
                                                "were bitwise equal"), check.reason
    assert (run.report.folder / "final-state" / "second-replay" / "reference.log").is_file()
    assert "reference: a clean replay of the faulted run's schedule: world size 2 to step " in check.reason
    assert ", then 1 from its step-" in check.reason
    block = json.loads((run.report.folder / "report.json").read_text())["final_state"]
    assert block["reference"]["kind"] == "schedule-replay" and [leg["world"] for leg in block["reference"]["legs"]] \
        == [2, 1]
    summary = (run.report.folder / "summary.md").read_text()
    assert "final state: equal" in summary and "## Final state" in summary


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
