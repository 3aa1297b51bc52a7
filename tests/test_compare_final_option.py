"""`--compare-final`'s settings: the final step both runs train to, the fixed-size job, the flags."""
from __future__ import annotations

import pytest

from elastic_chaos.errors import SpecError
from elastic_chaos.hypotheses.api import settings
from elastic_chaos.hypotheses.catalog import get
from elastic_chaos.hypotheses.final import elastic_job, fixed_job, pick_final_step
from elastic_chaos.spec import JobSpec


def test_the_default_final_step_is_the_third_checkpoint_past_the_last_step_waited_for():
    assert pick_final_step(50, 20, None) == 100
    assert pick_final_step(60, 20, None) == 120
    assert pick_final_step(5, 2, None) == 10


@pytest.mark.parametrize("given", [90, 40, 50])
def test_a_final_step_off_the_checkpoints_or_before_the_fault_is_refused(given):
    with pytest.raises(SpecError, match=f"--final-step {given}: a multiple of --checkpoint-every 20"):
        pick_final_step(50, 20, given)


def test_a_given_final_step_on_a_checkpoint_is_taken():
    assert pick_final_step(50, 20, 200) == 200


def test_the_job_runs_at_its_largest_size_and_stops_at_the_final_step():
    job = fixed_job(JobSpec(nodes="1:3", start_nodes=2, trainer_args=("--seed", "3")), 100)
    assert (job.min_nodes, job.max_nodes, job.initial_nodes) == (3, 3, 3)
    assert job.trainer_command_args()[-4:] == ["--seed", "3", "--max-steps", "100"]


def test_a_job_that_trains_on_without_its_lost_node_keeps_its_range_and_stops_at_the_final_step():
    job = elastic_job(JobSpec(nodes="1:2", trainer_args=("--seed", "3")), 100)
    assert (job.min_nodes, job.max_nodes) == (1, 2)
    assert job.trainer_command_args()[-4:] == ["--seed", "3", "--max-steps", "100"]


def test_no_replace_with_compare_final_on_a_fixed_size_job_is_refused_before_it_starts(tmp_path, capsys):
    from elastic_chaos.cli.main import main
    code = main(["run", "kill-node", "--nodes", "2:2", "--no-replace", "--compare-final",
                 "--report-dir", str(tmp_path / "run")])
    assert code == 2
    assert "a job of --nodes 2:2 cannot train on without the lost node; give it an elastic range" \
        in capsys.readouterr().err


def test_a_reference_leg_that_ends_off_the_checkpoint_steps_saves_at_its_end(tmp_path):
    from elastic_chaos.analysis.schedule import Leg
    from elastic_chaos.hypotheses.final import leg_command
    off = leg_command(Leg(2, 0, 152), python="py", args=["--seed", "3"], every=20, out=tmp_path)
    on = leg_command(Leg(1, 152, 200), python="py", args=["--seed", "3"], every=20, out=tmp_path)
    assert "--nproc-per-node=2" in off and "--nproc-per-node=1" in on
    assert off[off.index("--seed"):off.index("--checkpoint-dir")] == [
        "--seed", "3", "--max-steps", "152", "--checkpoint-every", "152"]
    assert on[on.index("--max-steps"):on.index("--checkpoint-dir")] == [
        "--max-steps", "200", "--checkpoint-every", "20"]
    assert on[on.index("--checkpoint-dir") + 1] == str(tmp_path / "reference-checkpoints")


def test_kill_node_takes_the_final_state_options():
    s = settings(get("kill-node"), {"compare_final": True, "final_step": 120, "final_tolerance": 1e-6}, "local")
    assert (s.params.compare_final, s.params.final_step, s.params.final_tolerance) == (True, 120, 1e-6)
    with pytest.raises(SpecError):
        settings(get("kill-node"), {"final_tolerance": -1.0}, "local")


@pytest.mark.parametrize("name", ["kill-node", "worker-crash", "spot-interruption", "kill-during-checkpoint"])
def test_the_hypotheses_that_recover_at_the_same_size_offer_compare_final(name):
    s = settings(get(name), {"compare_final": True}, "local")
    assert s.params.compare_final is True and s.params.final_step is None


def test_the_final_step_is_read_back_from_the_job_it_was_given_to():
    from elastic_chaos.hypotheses.final import job_final_step
    job = fixed_job(JobSpec(trainer_args=("--max-steps", "7", "--seed", "1")), 160)
    assert job_final_step(job) == 160


def test_overwrite_deletes_a_runs_final_state_folder_too(tmp_path):
    from elastic_chaos.runner.folder import check
    (tmp_path / "report.json").write_text("{}")
    (tmp_path / "final-state" / "reference-checkpoints").mkdir(parents=True)
    check(tmp_path, overwrite=True)   # refused before: "also holds final-state, which no run writes"
    (tmp_path / "mine.txt").write_text("a user's file")
    with pytest.raises(SpecError, match="mine.txt"):
        check(tmp_path, overwrite=True)


class _Run:
    """The two attributes _checkpoint_dir reads of a trial's run: its platform's name and checkpoint folder."""

    def __init__(self, name, folder):
        self.platform = type("P", (), {"name": name, "checkpoint_folder": lambda _self: folder})()


def test_the_compared_checkpoints_are_read_where_the_platform_keeps_them_on_this_machine(tmp_path):
    # the local cluster's pods save on its shared host-path volume: this machine reads it there
    from pathlib import PurePosixPath
    from types import SimpleNamespace

    from elastic_chaos.hypotheses.final import _checkpoint_dir
    from elastic_chaos.platforms.api import CheckpointFolder
    folder = CheckpointFolder(tmp_path / "run-1", PurePosixPath("/checkpoints/run-1"))
    assert _checkpoint_dir(SimpleNamespace(run=_Run("kubernetes", folder))) == tmp_path / "run-1"


def test_compare_final_where_the_checkpoints_are_not_on_this_machine_is_a_usage_error():
    from types import SimpleNamespace

    from elastic_chaos.hypotheses.final import _checkpoint_dir
    with pytest.raises(SpecError, match="the eks platform does not keep them here"):
        _checkpoint_dir(SimpleNamespace(run=_Run("eks", None)))
