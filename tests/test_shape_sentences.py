"""Scripts in the shapes users write, under kill-node and spot-interruption, every sentence held to the truth.

Three scripts of tests/shapes/ cover seven shapes: a line per epoch printed at its first iteration
with every node's local rank 0 saving one shared file and a line printed after the save, and no
SIGTERM handler (shared_snapshot_iter0.py); a short job that saves only at its end, and one that
finishes before its fault (end_only_save.py); a checkpoint folder of two files with the epoch's line
printed after the save (folder_ckpt_after_save.py). Each script records what it did (the truth,
tests/shape_checks.py); the test holds the report's figures and sentences to it, and the root
conftest.py reads every sentence of the report against the timeline (tests/sentences.py).

Seven real jobs of 2 nodes: about 6 minutes on this 2-core machine.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shape_checks import JOB, Truth, check_against_truth, label_is_true, shape

from elastic_chaos.analysis.verdict import Outcome
from elastic_chaos.events import CheckpointEv, FaultEv, NodeEv, ProgressEv, of
from elastic_chaos.reporting.views import table
from elastic_chaos.runner.run import ChaosRun

pytestmark = pytest.mark.slow

RunHypothesis = Callable[..., ChaosRun]
ITER0 = {"progress_regex": r"^\[GPU0\] Epoch (?P<step>\d+) \| Iter 0", "checkpoint": "snapshot.pt",
         "unit": "epoch", "checkpoint_every": 2}
END_ONLY = {"progress_regex": r"^Train Epoch: (?P<step>\d+)", "checkpoint": "model_final.pt", "unit": "epoch"}
AT_ONCE = {"rebalance_lead_s": None, "notice_s": 0.0}
"""SIGTERM as soon as steady state is reached, between two saves: lost progress is certain (a script
without a SIGTERM handler saves nothing on it), not a matter of where a 10 s notice happened to end."""
FOLDER = {"progress_regex": r"^epoch (?P<step>\d+) done", "resume_regex": r"^resumed from epoch (?P<step>\d+)",
          "checkpoint": "ckpt", "unit": "epoch", "checkpoint_every": 3}


@pytest.fixture
def truth_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "truth"
    folder.mkdir()
    return folder


def env(truth_dir: Path) -> dict[str, Any]:
    return {"env": {"SHAPE_TRUTH": str(truth_dir)}}


def reasons(run: ChaosRun) -> dict[str, str]:
    assert run.verdict is not None
    return {c.name: c.line() for c in run.verdict.checks}


def remarks(run: ChaosRun) -> list[str]:
    assert run.report is not None
    return table.remarks(run.report.result)


def labels_are_the_last_step_before(run: ChaosRun, truth: Truth) -> None:
    """Each save the watcher saw carries the last step whose line was printed before it (the truth's last
    ``step`` record before the save), never one printed later: except a line printed so soon after the
    save that its measured write window (the follower samples a log's size every ~10 ms) holds the save
    too, which either side describes truly (docs/INTEGRATE.md)."""
    events = run.timeline.events()
    saved = [e for e in of(events, CheckpointEv.SAVED) if e.data.via == "file"]
    assert saved, "no save was seen: the shape was not exercised"
    made, lines = truth.of("saved"), of(events, ProgressEv.STEP)
    for e in saved:
        at = min((r["t"] for r in made), key=lambda t: abs(t - e.t))   # the truth's save this event saw
        span = 0.05 if (e.data.files or 1) > 1 else 0.0                  # a folder's files, a few ms apart
        before = [r for r in truth.of("step") if r["t"] < at]
        assert not before or label_is_true(e.data.step, e.t, at, truth, lines, span), \
            f"save at +{e.t - run.started_at:.2f} s labelled {e.data.step}; the last line before it was " \
            f"{before[-1]['step']} (+{before[-1]['t'] - run.started_at:.2f} s)"


def saves_in_warning_window(run: ChaosRun, truth: Truth) -> int:
    """Saves the truth says completed between the first warning and the target's end (one per moment:
    writers of one save at once count once)."""
    [record] = run.faults
    warned = float(record.detail.get("rebalance_at") or record.detail.get("notice_at") or record.injected_at)
    assert record.hit is not None
    gone = record.hit.ended_at()
    moments = sorted(r["t"] for r in truth.of("saved") if warned <= r["t"] <= gone)
    return sum(1 for i, t in enumerate(moments) if i == 0 or t - moments[i - 1] > 0.5)


def killed_node_lines_shown(run: ChaosRun) -> None:
    """The killed node's excerpt is not empty: it printed lines up to its end."""
    page = (run.report_dir / "report.html").read_text()
    [record] = run.faults
    quiet = re.search(r"No log lines in this window from ([^<]*)\.", page)
    assert quiet is None or record.target not in quiet[1], f"{record.target}'s excerpt says it printed nothing"


def test_iter0_lines_and_every_node_saving_one_shared_file_under_kill_node(run_hypothesis: RunHypothesis,
                                                                          truth_dir: Path) -> None:
    run = run_hypothesis("kill-node", **JOB, replace_lost_nodes=False, **env(truth_dir), **ITER0,
                         script=shape("shared_snapshot_iter0.py"))
    truth, _ = check_against_truth(run, truth_dir)
    labels_are_the_last_step_before(run, truth)
    raced = [r for r in remarks(run) if "writers at once" in r]
    assert raced and "--node-local-workdir" in raced[0], remarks(run)
    killed_node_lines_shown(run)


def test_iter0_lines_without_a_sigterm_handler_under_spot_interruption(run_hypothesis: RunHypothesis,
                                                                       truth_dir: Path) -> None:
    run = run_hypothesis("spot-interruption", **JOB, replace_lost_nodes=False, **env(truth_dir), **ITER0,
                         **AT_ONCE, script=shape("shared_snapshot_iter0.py"), expect_failed={"bounded-loss"})
    truth, rec = check_against_truth(run, truth_dir)
    assert rec.lost_steps and rec.lost_steps > 0   # no save on SIGTERM: the epochs since the last one
    said = reasons(run)["emergency-save"]
    m = re.search(r"(\d+) save\(s\) in that window", said)
    assert m is not None and int(m[1]) == saves_in_warning_window(run, truth), said
    killed_node_lines_shown(run)


def test_a_job_that_saves_only_at_its_end_says_every_epoch_was_lost(run_hypothesis: RunHypothesis,
                                                                    truth_dir: Path) -> None:
    run = run_hypothesis("kill-node", **JOB, replace_lost_nodes=False, **env(truth_dir), **END_ONLY,
                         script=shape("end_only_save.py"), checkpoint_every=200, steady_steps=6)
    truth, rec = check_against_truth(run, truth_dir)
    assert rec.resumed_from_step == 0 and rec.lost_steps == truth.pre_step
    said = reasons(run)
    assert "every epoch since the start was lost" in said["bounded-loss"], said["bounded-loss"]
    assert said["observation"].startswith("not checked: whether the script saves to 'model_final.pt'"), said
    assert "saves only at its end" in said["observation"]


def test_a_job_that_saves_only_at_its_end_under_spot_interruption(run_hypothesis: RunHypothesis,
                                                                  truth_dir: Path) -> None:
    run = run_hypothesis("spot-interruption", **JOB, replace_lost_nodes=False, **env(truth_dir), **END_ONLY,
                         script=shape("end_only_save.py"), checkpoint_every=200, steady_steps=6,
                         expect_failed={"bounded-loss", "emergency-save"})
    truth, rec = check_against_truth(run, truth_dir)
    assert rec.lost_steps == truth.pre_step
    assert "0 save(s) in that window" in reasons(run)["emergency-save"]


def test_a_job_that_finishes_before_its_fault_ends_the_run_at_once(run_hypothesis: RunHypothesis,
                                                                   truth_dir: Path) -> None:
    began = time.monotonic()
    run = run_hypothesis("kill-node", **JOB, replace_lost_nodes=False, **env(truth_dir), **END_ONLY,
                         script=shape("end_only_save.py", "--epochs", "6"), steady_steps=20,
                         expect_failed={"job-finished"})
    assert run.verdict is not None and run.verdict.outcome is Outcome.JOB_FINISHED
    assert not of(run.timeline.events(), FaultEv.INJECTED)
    finished = [e for e in run.timeline.events() if e.type.name == "workers_finished"]
    assert finished, "no agent said its workers finished"
    # it ends within seconds of the finish, not at the steady-state timeout (200 s)
    assert time.monotonic() - began < 120
    teardown = next(e for e in run.timeline.events() if e.type.name == "phase" and e.data.phase == "teardown")
    assert teardown.t - finished[0].t < 5.0, f"teardown {teardown.t - finished[0].t:.1f} s after the finish"
    assert "its last epoch seen was 6" in reasons(run)["job-finished"]


def test_a_folder_checkpoint_with_the_line_after_the_save_under_kill_node(run_hypothesis: RunHypothesis,
                                                                         truth_dir: Path) -> None:
    run = run_hypothesis("kill-node", **JOB, replace_lost_nodes=False, **env(truth_dir), **FOLDER,
                         script=shape("folder_ckpt_after_save.py"))
    truth, _ = check_against_truth(run, truth_dir)
    labels_are_the_last_step_before(run, truth)
    saved = [e for e in of(run.timeline.events(), CheckpointEv.SAVED) if e.data.via == "file"]
    assert all(e.data.files == 2 for e in saved), [(e.data.path, e.data.files) for e in saved]
    # one save, one event: as many events as the truth's saves up to teardown
    assert len(saved) <= len(truth.of("saved"))
    killed_node_lines_shown(run)


def test_a_folder_checkpoint_under_spot_interruption(run_hypothesis: RunHypothesis, truth_dir: Path) -> None:
    run = run_hypothesis("spot-interruption", **JOB, replace_lost_nodes=False, **env(truth_dir),
                         **{**FOLDER, "checkpoint_every": 4}, **AT_ONCE,
                         script=shape("folder_ckpt_after_save.py", "--save-every", "4"), expect_failed={"bounded-loss"})
    truth, _ = check_against_truth(run, truth_dir)
    said = reasons(run)["emergency-save"]
    m = re.search(r"(\d+) save\(s\) in that window", said)
    assert m is not None and int(m[1]) == saves_in_warning_window(run, truth), said
    lost = of(run.timeline.events(), NodeEv.LOST)
    assert lost and lost[0].data.action in ("sigterm", "sigterm-then-sigkill")
