"""The corpus of script shapes: unmodified training scripts written the ways people write
them, each run under kill-node on real elastic jobs, the report checked against truth
the test computes.

Each script in tests/shapes/ prints its progress its own way (every batch, every epoch,
through ``logging`` with a glog-style prefix, a tqdm bar redrawn with carriage returns),
saves its own way (rank 0 through a rename, every node's local rank 0 on its own disk,
one file per epoch in a directory, not at all) and resumes with or without a line that
says so. Besides, it appends what it really did to a truth folder elastic-chaos never
reads (tests/shapes/shape_truth.py). From that the test computes what the report must
say: the step before the fault (every step the workers started before it completed),
the step the restarted workers resumed from, what was lost, the world sizes, and every
save with its step and node.

One job per shape (2 nodes, last_call_timeout 3 s): about 4-6 minutes for the four on
this 2-core machine under other load (see the report of the branch that added it).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shape_checks import JOB, Truth, check_against_truth, label_is_true, shape

from elastic_chaos.events import CheckpointEv, NodeEv, ProgressEv, RunnerEv, first, of
from elastic_chaos.runner.run import ChaosRun
from elastic_chaos.watchers.checkpoints import CheckpointWatcher

pytestmark = pytest.mark.slow

SAVE_SETTLE_S = 1.0
"""A save completed this long before teardown was certainly seen by the file watcher
(it needs one still poll of 0.2 s after the write)."""


def check_saves(run: ChaosRun, truth: Truth, *, per_node: bool = False) -> list[Any]:
    """Every save the script completed is one checkpoint/saved event of the file watcher,
    with the step the script saved (and, on node-local disks, the node that wrote it)."""
    events = run.timeline.events()
    teardown = first(events, RunnerEv.PHASE, where=lambda e: e.data.phase == "teardown")
    assert teardown is not None
    saved = [e for e in of(events, CheckpointEv.SAVED) if e.data.via == "file"]
    # a file counts as saved once it has held still for one poll: a save that landed on a node's own disk
    # within two polls of that disk going with its node had no poll to hold still for (its writer was killed
    # after it, or in it: a torn file looks the same), so it is not expected
    lost = {e.node: e.t for e in of(events, NodeEv.DISK_LOST)}
    unseeable = 2 * CheckpointWatcher.interval_s + 0.1
    expected = [want for want in truth.saves(until=teardown.t - SAVE_SETTLE_S)
                if not (want["node"] in lost and lost[want["node"]] - unseeable < want["t"])]
    assert expected, "the script saved nothing before teardown: the shape was not exercised"
    unmatched = list(saved)
    steps = of(events, ProgressEv.STEP)
    for want in expected:
        match = next((e for e in unmatched if Path(e.data.path) == Path(want["path"])
                      and e.t <= want["t"] + 0.05 and want["t"] - e.t < 2.0), None)
        assert match is not None, f"save of step {want['step']} at {want['path']} ({want['node']}) not observed; " \
                                  f"observed: {[(e.node, e.data.step, e.data.path) for e in saved]}"
        # the step printed before it, or where the evidence cannot order them (the step line's write window
        # overlaps the save's mtime: one ~10 ms sample, and the coarse clock's lag) the one printed after
        assert label_is_true(match.data.step, match.t, want["t"], truth, steps), \
            f"save of step {want['step']} reported as step {match.data.step}"
        if per_node:
            assert match.node == want["node"], f"save on {want['node']} attributed to {match.node}"
        unmatched.remove(match)
    late = [e for e in unmatched if e.t < teardown.t - SAVE_SETTLE_S]
    assert not late, f"saves observed that the script never made: {[(e.node, e.data.step) for e in late]}"
    return saved


@pytest.fixture
def truth_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "truth"
    folder.mkdir()
    return folder


RunHypothesis = Callable[..., ChaosRun]


def test_batch_prints_and_rank0_saves_through_a_rename_with_a_resume_line(run_hypothesis: RunHypothesis,
                                                                          truth_dir: Path) -> None:
    run = run_hypothesis("kill-node", **JOB, replace_lost_nodes=False, env={"SHAPE_TRUTH": str(truth_dir)},
                         script=shape("batch_prints_rank0_rename.py", "--save-every", "10"),
                         progress_regex=r"^step (?P<step>\d+) loss",
                         resume_regex=r"loaded checkpoint .*\(step (?P<step>\d+)\)",
                         checkpoint="checkpoint.pth.tar", steady_steps=25, checkpoint_every=10)
    truth, rec = check_against_truth(run, truth_dir)
    assert not any("inferred" in why for why in rec.missing)  # the script said where it resumed
    saved = check_saves(run, truth)
    assert all(e.node is None for e in saved)  # one shared file: no node wrote it alone
    # two nodes share this machine's cores: what they ran with is said in the report
    assert run.report is not None and run.report.result.threads is not None
    assert f"threads: {run.report.result.threads.advice}" in (run.report_dir / "summary.md").read_text()


def test_epoch_logging_with_a_glog_prefix_and_every_node_saving_on_its_own_disk(run_hypothesis: RunHypothesis,
                                                                               truth_dir: Path) -> None:
    run = run_hypothesis("kill-node", **JOB, env={"SHAPE_TRUTH": str(truth_dir)}, node_local_workdir=True,
                         script=shape("epoch_logging_every_node.py", "--save-every", "2"), unit="epoch",
                         progress_regex=r"\] epoch (?P<step>\d+) done", checkpoint="snapshot.pt",
                         resume_regex=r"Resuming training from snapshot at epoch (?P<step>\d+)",
                         checkpoint_every=2)
    truth, rec = check_against_truth(run, truth_dir)
    check_saves(run, truth, per_node=True)
    target = run.report.faults[0].target if run.report else None
    # the lost node's disk went with it; its replacement started on an empty one
    local = truth.of("local_snapshot")
    replacement = [r for r in local if r["node"] not in ("node-0", target)]
    assert replacement and all(r["epoch"] is None for r in replacement), local
    lost_folder = Path(next(r["folder"] for r in local if r["node"] == target))
    assert not lost_folder.exists() or not any(lost_folder.iterdir()), f"{target}'s local disk outlived it"
    [gone] = of(run.timeline.events(), NodeEv.DISK_LOST)
    assert gone.node == target and "snapshot.pt" in gone.data.files  # and the timeline says what went
    # the survivor's own snapshot, the newest left when the new workers started: a save the survivor was
    # finishing as the fault hit completes after it (seen once: epoch 6 saved 0.04 s after the kill)
    restarted = truth.of("resumed", new=True)[0]["t"]
    survivor = [r for r in truth.of("saved") if r["node"] == "node-0" and r["t"] < restarted]
    assert truth.resumed_from == survivor[-1]["step"]


def test_a_tqdm_bar_redrawn_with_carriage_returns_and_one_file_per_epoch_without_a_resume_line(
        run_hypothesis: RunHypothesis, truth_dir: Path) -> None:
    run = run_hypothesis("kill-node", **JOB, replace_lost_nodes=False, env={"SHAPE_TRUTH": str(truth_dir)},
                         script=shape("tqdm_bar_rank0_dir.py", "--batch-time", "0.15"), unit="epoch",
                         progress_regex=r"Epoch (?P<step>\d+): 100%", checkpoint="lightning_logs",
                         steady_steps=4, checkpoint_every=1)
    truth, rec = check_against_truth(run, truth_dir)
    assert any("inferred" in why for why in rec.missing)  # no resume line: inferred, and said so
    check_saves(run, truth)


def test_epoch_prints_and_no_checkpoint_lose_everything_and_the_bound_says_so(run_hypothesis: RunHypothesis,
                                                                             truth_dir: Path) -> None:
    # no --steady-steps: for a script it follows from --checkpoint-every (halfway into the 3rd interval)
    run = run_hypothesis("kill-node", **JOB, replace_lost_nodes=False, env={"SHAPE_TRUTH": str(truth_dir)},
                         script=shape("epoch_prints_no_checkpoint.py"), unit="epoch",
                         progress_regex=r"^Epoch (?P<step>\d+) \|", checkpoint_every=2,
                         expect_failed={"bounded-loss"})
    truth, rec = check_against_truth(run, truth_dir)
    assert truth.resumed_from == 0 and rec.lost_steps == truth.pre_step >= 5
    assert not of(run.timeline.events(), CheckpointEv.SAVED)
