"""The shapes of tests/test_script_shapes.py that the toolkit once got wrong, each pinned
without a job: a tqdm bar redrawn with carriage returns, a script logging with a
glog-style prefix, a save timed against a progress line read late under load, every
node saving into one shared path and the torn checkpoint a restart then loads."""
from __future__ import annotations

import os
import time
from pathlib import Path

from elastic_chaos.analysis.outcome import RootCause, job_outcome
from elastic_chaos.events import CheckpointEv, Event, NodeEv, ProgressEv, Timeline, of
from elastic_chaos.spec import Observation
from elastic_chaos.watchers.checkpoints import CheckpointWatcher
from elastic_chaos.watchers.logs import LogFollower, parse_raw
from elastic_chaos.watchers.script_lines import ScriptLines


def follower(log: Path, observe: Observation, tl: Timeline | None = None) -> tuple[LogFollower, Timeline]:
    tl = tl or Timeline()
    return LogFollower(tl, lambda: {"node-0": log}, ScriptLines(observe)), tl


def steps(events: list[Event]) -> list[int]:
    return [e.data.step for e in of(events, ProgressEv.STEP)]


def test_a_progress_bar_redrawn_with_carriage_returns_is_read_redraw_by_redraw(tmp_path):
    # Lightning's bar: one line for the whole fit, `\r` before each redraw, no `\n` until the end
    log = tmp_path / "node-0.log"
    log.write_bytes(b"".join(f"\rEpoch {e}: {p:3d}%|##  | {p // 25}/4 [00:00<00:00, loss=0.3]".encode()
                             for e in range(3) for p in (0, 25, 50, 75, 100)) + b"\rEpoch 3:   0%|")
    f, tl = follower(log, Observation(progress_regex=r"Epoch (?P<step>\d+): 100%"))
    f.poll()
    f.finish()
    assert steps(tl.events()) == [0, 1, 2]


def test_windows_line_ends_are_one_line_each(tmp_path):
    log = tmp_path / "node-0.log"
    log.write_bytes(b"step 1\r\nstep 2\r\n")
    f, tl = follower(log, Observation(progress_regex=r"^step (?P<step>\d+)$"))
    f.poll()
    f.finish()
    assert steps(tl.events()) == [1, 2]


def test_a_script_logging_with_a_glog_prefix_is_read_and_torchruns_own_lines_are_not(tmp_path):
    log = tmp_path / "node-0.log"
    log.write_text(
        "I1126 00:38:09.100000 29365 /venv/lib/python3.11/site-packages/torch/distributed/elastic/agent/server/"
        "api.py:553] [default] epoch 7 done (torch's own line, however it reads)\n"
        "I1126 00:38:10.123456 29400 epoch_logging_every_node.py:88] epoch 3 done | loss 0.1 | world 2\n"
        "I1126 00:38:10.623456 29400 train.py:71] Resuming training from snapshot at epoch 2\n")
    f, tl = follower(log, Observation(progress_regex=r"epoch (?P<step>\d+) done",
                                      resume_regex=r"from snapshot at epoch (?P<step>\d+)"))
    f.poll()
    f.finish()
    assert steps(tl.events()) == [3]
    assert [e.data.step for e in of(tl.events(), CheckpointEv.LOADED)] == [2]


def test_a_script_line_is_timed_when_the_log_last_grew_not_when_it_was_read(tmp_path):
    log = tmp_path / "node-0.log"
    log.write_text("epoch 1 done\nepoch 2 done\n")
    written = time.time() - 5.0  # the follower reads five seconds late (a loaded machine)
    os.utime(log, (written, written))
    f, tl = follower(log, Observation(progress_regex=r"epoch (?P<step>\d+) done"))
    f.poll()
    f.finish()
    assert [round(e.t, 3) for e in of(tl.events(), ProgressEv.STEP)] == [round(written, 3)] * 2


def test_a_save_right_after_a_progress_line_read_late_belongs_to_that_step(tmp_path):
    # the defect: a step was stamped when its line was read and a save was given the latest
    # step on the timeline when the file held still; under load the follower read "epoch 4
    # done" after that, and the save made just after it was put on epoch 3
    log, snap = tmp_path / "node-0.log", tmp_path / "snapshot.pt"
    log.write_text("")
    f, tl = follower(log, Observation(progress_regex=r"epoch (?P<step>\d+) done"))
    watcher = CheckpointWatcher(tl, snap, read_until=lambda: f.read_until)
    watcher.poll()  # the baseline: no snapshot yet
    with open(log, "a") as out:
        out.write("epoch 3 done\n")
    f.poll()
    time.sleep(0.05)
    with open(log, "a") as out:
        out.write("epoch 4 done\n")
    time.sleep(0.02)
    snap.write_bytes(b"weights of epoch 4")
    time.sleep(0.3)  # the follower is late: it has not read "epoch 4 done" yet
    watcher.poll()
    watcher.poll()  # the file held still: a complete save, not yet attributed
    assert not of(tl.events(), CheckpointEv.SAVED)
    f.poll()
    watcher.poll()
    f.finish()
    saved = of(tl.events(), CheckpointEv.SAVED)
    assert [e.data.step for e in saved] == [4]


TORN = ("PytorchStreamReader failed reading zip archive: failed finding central directory. This is an internal "
        "miniz error. If you are seeing this error, there is a high likelihood that your checkpoint file is corrupted.")


def test_every_node_saving_into_one_shared_path_and_a_torn_load_is_named_with_the_option_that_avoids_it():
    # the shape that races: local rank 0 of every node torch.saves snapshot.pt into the shared workdir;
    # a restart that loads the file two writers made fails with torch's miniz error, which a job
    # outcome used to call "exhausted its restart budget" and nothing more
    lines = ["[rank0]: Traceback (most recent call last):", f"[rank0]: RuntimeError: {TORN}"]
    errors = [e for e in (parse_raw(line, "node-0", 10.0 + i) for i, line in enumerate(lines)) if e is not None]
    assert [e.data.root for e in errors] == ["corrupt_checkpoint"]
    own = parse_raw(f"RuntimeError: {TORN}", "node-0", 12.0)  # a script's own traceback, no rank prefix
    assert own is not None and own.data.root == "corrupt_checkpoint"
    outcome = job_outcome([Event.make(NodeEv.STARTED, 1.0, "node-0"), *errors,
                           Event.make(NodeEv.EXITED, 20.0, "node-0", {"exit_code": 1})])
    assert outcome.root_causes == {RootCause.CORRUPT_CHECKPOINT}
    assert "written by several nodes at once" in outcome.reasons[0] and "--node-local-workdir" in outcome.reasons[0]
