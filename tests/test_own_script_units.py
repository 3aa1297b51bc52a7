"""Bring your own script, the parts that need no elastic job: reading a script's own
log lines, watching its checkpoint file, the observation block, the backend shim,
the command line's `--` and its usage errors."""
from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from elastic_chaos.analysis.observation import checks, summarize
from elastic_chaos.analysis.recovery_analysis import analyze_fault
from elastic_chaos.cli.main import split_script
from elastic_chaos.errors import SpecError
from elastic_chaos.events import AgentEv, CheckpointEv, Event, ProgressEv, Source, Timeline, of, read_timeline
from elastic_chaos.events.progress_events import Step
from elastic_chaos.host.etcd import free_port
from elastic_chaos.hypotheses.api import settings
from elastic_chaos.spec import JobSpec, Observation, locate_script
from elastic_chaos.watchers.checkpoints import CheckpointWatcher
from elastic_chaos.watchers.logs import LogFollower
from elastic_chaos.watchers.script_lines import ScriptLines

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def assert_usage_error(out: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    for needle in needles:
        assert needle in out.stderr


# -- usage errors, before anything starts ------------------------------------------

def test_a_progress_regex_without_a_step_group_is_a_usage_error(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    out = cli("run", "kill-node", "--progress-regex", r"epoch (\d+)", "--report-dir", str(tmp_path / "r"),
              "--", str(script))
    assert_usage_error(out, "no named group 'step'", "(?P<step>")
    assert not (tmp_path / "r").exists()  # nothing was started


def test_a_regex_that_does_not_compile_is_a_usage_error(tmp_path):
    out = cli("run", "kill-node", "--resume-regex", "resumed (?P<step>\\d+", "--", "train.py")
    assert_usage_error(out, "--resume-regex", "not a valid Python regular expression")


def test_a_script_that_does_not_exist_is_a_usage_error(tmp_path):
    out = cli("run", "kill-node", "--report-dir", str(tmp_path / "r"), "--", "no_such_train.py", "--lr", "1",
              cwd=tmp_path)
    assert_usage_error(out, "training script 'no_such_train.py' not found", str(tmp_path / "no_such_train.py"))
    assert not (tmp_path / "r").exists()


def test_nothing_after_the_double_dash_is_a_usage_error():
    assert_usage_error(cli("run", "kill-node", "--"), "no training script given")


def test_observing_options_without_a_script_are_a_usage_error():
    assert_usage_error(cli("run", "kill-node", "--checkpoint", "snap.pt"), "give it after `--`")


def test_a_bad_env_pair_is_a_usage_error():
    out = cli("run", "kill-node", "--env", "NOEQUALS", "--", "x.py")
    assert out.returncode == 2 and "is not KEY=VALUE" in out.stderr


def test_everything_after_the_double_dash_belongs_to_the_script():
    words, script = split_script(["-v", "run", "kill-node", "--nodes", "1:2", "--", "t.py", "--nodes", "9", "--"])
    assert words == ["-v", "run", "kill-node", "--nodes", "1:2"]
    assert script == ["t.py", "--nodes", "9", "--"]
    assert split_script(["run", "kill-node"]) == (["run", "kill-node"], None)
    assert split_script(["report", "--", "-odd-dir"]) == (["report", "--", "-odd-dir"], None)


def test_a_script_path_is_made_absolute_and_a_module_is_found(tmp_path):
    (tmp_path / "train.py").write_text("")
    assert locate_script(["train.py", "--x"], base=tmp_path) == (str(tmp_path / "train.py"), "--x")
    example = "elastic_chaos.trainer.lightning_example"
    assert locate_script(["-m", example]) == ("-m", example)
    with pytest.raises(SpecError, match="module 'no_such.module' not found"):
        locate_script(["-m", "no_such.module"])
    with pytest.raises(SpecError, match="must be the script's path"):
        locate_script(["--nproc-per-node", "2", "train.py"])


def test_the_fixture_takes_the_same_options_as_the_command_line(tmp_path):
    s = settings(None, {"script": ["t.py"], "progress_regex": r"it=(?P<step>\d+)", "checkpoint": Path("snap.pt"),
                        "workdir": tmp_path, "backend": "gloo", "unit": "iteration", "env": {"A": "1"},
                        "replace_lost_nodes": False}, "local")
    job = s.job
    assert job.observe == Observation(progress_regex=r"it=(?P<step>\d+)", checkpoint="snap.pt", unit="iteration")
    assert job.workdir == str(tmp_path) and job.backend.value == "gloo" and job.env == (("A", "1"),)
    assert s.platform == {"replace_lost_nodes": False}
    with pytest.raises(SpecError, match="no named group 'step'"):
        settings(None, {"script": ["t.py"], "progress_regex": "it=(\\d+)"}, "local")


# -- a script's own lines -------------------------------------------------------

GLOG = "I1122 14:12:48.061000 30248 torch/distributed/elastic/agent/server/api.py:553] "
RDZV_RESULT = [GLOG + "[default] Rendezvous complete for workers. Result:", GLOG + "  restart_count=1",
               GLOG + "  master_addr=localhost", GLOG + "  group_rank=0", GLOG + "  group_world_size=2",
               GLOG + "  local_ranks=[0, 1]", GLOG + "", GLOG + "[default] Starting worker group"]


def follow(tmp_path: Path, lines: list[str], observe: Observation, nproc: int = 1) -> list[Event]:
    log = tmp_path / "node-0.log"
    log.write_text("\n".join(lines) + "\n")
    tl = Timeline()
    follower = LogFollower(tl, lambda: {"node-0": log}, ScriptLines(observe, nproc))
    follower.poll()
    follower.finish()  # the follower keeps log files open between polls
    return tl.events()


def test_progress_lines_become_steps_with_the_agents_world_size(tmp_path):
    events = follow(tmp_path, [*RDZV_RESULT, "[train] it=00041 loss=0.3", "[train] it=00042 loss=0.2",
                               "unrelated line"], Observation(progress_regex=r"it=(?P<step>\d+)"), nproc=2)
    steps = of(events, ProgressEv.STEP)
    assert [e.data.step for e in steps] == [41, 42]
    assert steps[0].data.world_size == 4 and steps[0].data.world_size_from == "agent"  # 2 nodes x 2
    assert steps[0].data.via == "regex" and steps[0].data.restart_count == 1
    assert steps[0].data.line == "[train] it=00041 loss=0.3"


def test_a_world_size_group_in_the_regex_wins(tmp_path):
    events = follow(tmp_path, [*RDZV_RESULT, "it=7 world=3"],
                    Observation(progress_regex=r"it=(?P<step>\d+) world=(?P<world_size>\d+)"))
    assert [e.data.world_size for e in of(events, ProgressEv.STEP)] == [3]


def test_several_local_ranks_printing_one_step_make_one_event(tmp_path):
    events = follow(tmp_path, ["epoch 3 done", "epoch 3 done", "epoch 4 done", *RDZV_RESULT, "epoch 4 done"],
                    Observation(progress_regex=r"epoch (?P<step>\d+) done"))
    # the restarted generation may repeat the last step: that one counts again
    assert [e.data.step for e in of(events, ProgressEv.STEP)] == [3, 4, 4]


def test_a_resume_line_is_a_checkpoint_loaded_and_not_a_step(tmp_path):
    events = follow(tmp_path, ["restored from epoch 20", "epoch 21"],
                    Observation(progress_regex=r"epoch (?P<step>\d+)",
                                resume_regex=r"restored from epoch (?P<step>\d+)"))
    assert [(e.type, e.data.step) for e in events] == [(CheckpointEv.LOADED, 20), (ProgressEv.STEP, 21)]


def test_a_step_group_that_is_not_a_number_is_reported_once(tmp_path):
    events = follow(tmp_path, ["epoch one", "epoch two", "epoch 3"], Observation(progress_regex=r"epoch (?P<step>\w+)"))
    unparsed = of(events, ProgressEv.UNPARSED)
    assert len(unparsed) == 1 and "'one' is not an integer" in unparsed[0].data.why
    assert [e.data.step for e in of(events, ProgressEv.STEP)] == [3]


def test_without_a_resume_regex_lost_progress_is_inferred_and_says_so():
    f = 100.0
    ev = [Event.make(ProgressEv.STEP, 90 + i, "node-0", {"step": 10 + i, "via": "regex", "world_size": 2})
          for i in range(8)]  # steps 10..17 before the fault
    ev += [Event.make(AgentEv.WORKERS_STARTING, 105.0, "node-0"),
           Event.make(ProgressEv.STEP, 110.0, "node-0", {"step": 16, "via": "regex", "world_size": 1}),
           Event.make(ProgressEv.STEP, 111.0, "node-0", {"step": 17, "via": "regex", "world_size": 1}),
           Event.make(ProgressEv.STEP, 112.0, "node-0", {"step": 18, "via": "regex", "world_size": 1})]
    rec = analyze_fault(ev, fault="kill-node", target="node-1", injected_at=f)
    assert rec.pre_step == 17 and rec.resumed_from_step == 15 and rec.lost_steps == 2
    assert rec.world_size_before == 2 and rec.world_size_after == 1 and rec.regain_s == 12.0
    assert any("inferred" in m for m in rec.missing)


# -- the checkpoint file ------------------------------------------------------------

def save_atomically(path: Path, payload: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(payload)
    os.replace(tmp, path)


def test_a_file_rewritten_at_every_poll_is_no_save_and_is_counted_as_unsettled(tmp_path):
    # a script saving faster than one poll: never still, so never confirmed complete -- and counted, so the
    # steady check can say why no save was seen instead of "nothing was written"
    tl = Timeline()
    snap = tmp_path / "snap.pt"
    w = CheckpointWatcher(tl, snap)
    w.poll()
    for i in range(4):
        save_atomically(snap, b"x" * (i + 1))
        w.poll()
    assert tl.select(Source.CHECKPOINT) == [] and w.unsettled == 3
    w.poll()  # it held still at last: one complete save
    assert len(tl.select(Source.CHECKPOINT)) == 1


def test_each_replacement_of_the_checkpoint_file_is_one_saved_event(tmp_path):
    tl = Timeline()
    tl.emit(ProgressEv.STEP, "node-0", Step(step=40, via="regex"), t=time.time() - 1)
    snap = tmp_path / "snap.pt"
    w = CheckpointWatcher(tl, snap)
    w.poll()  # baseline: nothing there
    save_atomically(snap, b"one")
    w.poll()
    w.poll()  # held still for a poll: a complete save
    w.poll()
    save_atomically(snap, b"two!")
    w.poll()
    w.poll()
    saved = tl.select(Source.CHECKPOINT)
    assert [e.type for e in saved] == [CheckpointEv.SAVED, CheckpointEv.SAVED]
    assert saved[0].data.path == str(snap) and saved[0].data.via == "file"
    assert saved[0].data.step == 40 and saved[0].data.step_from == "progress"
    assert saved[0].t == pytest.approx(snap.stat().st_mtime, abs=5)


def test_the_file_watchers_saves_read_back_from_timeline_jsonl_whole(tmp_path):
    # the defect this guards: a save seen by file carried step_from "progress", the reader took
    # step_from for an int, dropped every such line and called the file "cut off mid-write"
    tl = Timeline(tmp_path / "timeline.jsonl")
    tl.emit(ProgressEv.STEP, "node-0", Step(step=40, via="regex"), t=time.time() - 1)
    snap = tmp_path / "snap.pt"
    w = CheckpointWatcher(tl, snap)
    w.poll()
    for content in (b"one", b"two!"):
        save_atomically(snap, content)
        w.poll()
        w.poll()
    tl.close()
    read = read_timeline(tmp_path / "timeline.jsonl")
    assert read.errors == [] and read.note() is None
    saves = of(read.events, CheckpointEv.SAVED)
    assert len(saves) == 2 and all(e.data.step == 40 and e.data.step_from == "progress" for e in saves)


def test_a_write_still_growing_is_not_yet_a_save(tmp_path):
    tl = Timeline()
    snap = tmp_path / "snap.pt"
    w = CheckpointWatcher(tl, snap)
    w.poll()
    with open(snap, "wb") as f:
        for chunk in range(3):
            f.write(b"x" * (chunk + 1))
            f.flush()
            w.poll()  # a different size each poll: in progress
    assert not tl.events()
    w.poll()
    assert [e.type for e in tl.events()] == [CheckpointEv.SAVED]


def test_a_checkpoint_directory_ignores_temporary_files_and_what_was_there_before(tmp_path):
    (tmp_path / "old.ckpt").write_bytes(b"before the job")
    tl = Timeline()
    w = CheckpointWatcher(tl, tmp_path)
    w.poll()
    (tmp_path / ".step-3.ckpt.partial").write_bytes(b"half")
    (tmp_path / "step-3.ckpt.tmp").write_bytes(b"half")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "step-3.ckpt").write_bytes(b"whole")
    w.poll()
    w.poll()
    assert [Path(e.data.path).name for e in tl.events()] == ["step-3.ckpt"]


def test_a_checkpoint_path_never_written_fails_the_run_and_lists_the_workdir(tmp_path):
    (tmp_path / "ckpt").mkdir()
    job = JobSpec(script=("t.py",), observe=Observation(progress_regex=r"it=(?P<step>\d+)", checkpoint="snap.pt"))
    events = [Event.make(ProgressEv.STEP, 1.0, "node-0", {"step": 1, "via": "regex"})]
    summary = summarize(events, job, tmp_path)
    assert summary is not None and summary.checkpoint is not None and summary.checkpoint.never_written is True
    assert summary.resume == "inferred from the first progress after a restart"
    [(ok, reason)] = checks(summary)   # the job did not finish: a wrong path, or a save only at its end
    assert ok is None and "whether the script saves to 'snap.pt': nothing was written there" in reason
    assert "ckpt/" in reason and "saves only at its end" in reason
    finished = summarize([*events, Event.make(AgentEv.WORKERS_FINISHED, 2.0, "node-0", {})], job, tmp_path)
    [(ok, reason)] = checks(finished)  # it trained to its end and wrote nothing there: a wrong path
    assert ok is False and "though the job trained to its end" in reason


def test_the_reference_trainer_has_no_observation_block():
    assert summarize([], JobSpec(), None) is None


# -- the backend shim ---------------------------------------------------------------

NCCL_SCRIPT = """
import sys, torch.distributed as dist
from torch.distributed import init_process_group
init_process_group("nccl")                      # hard-coded, as GPU scripts are
print("backend", dist.get_backend(), "argv", sys.argv[1:], "main", __name__, flush=True)
dist.destroy_process_group()
"""


def test_a_script_that_hard_codes_nccl_runs_on_gloo_through_the_shim(tmp_path):
    script = tmp_path / "train_nccl.py"
    script.write_text(NCCL_SCRIPT)
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}
    out = subprocess.run([sys.executable, "-m", "elastic_chaos.trainer.launch", "--backend", "gloo", str(script),
                          "--lr", "3"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "backend gloo argv ['--lr', '3'] main __main__" in out.stdout


# -- docs/INTEGRATE.md shows the real diff ------------------------------------------

def _code(path: Path) -> list[str]:
    text = path.read_text()
    body = re.sub(r'^""".*?"""\n', "", text, count=1, flags=re.S)  # the module docstrings differ on purpose
    return body.splitlines(keepends=True)


def test_the_integration_guide_shows_the_diff_of_the_two_example_scripts():
    plain, integrated = REPO / "examples" / "ddp_train.py", REPO / "examples" / "ddp_train_progress.py"
    diff = "".join(difflib.unified_diff(_code(plain), _code(integrated), "examples/ddp_train.py",
                                        "examples/ddp_train_progress.py", n=1))
    guide = (REPO / "docs" / "INTEGRATE.md").read_text()
    shown = re.search(r"```diff\n(.*?)```", guide, re.S)
    assert shown is not None, "docs/INTEGRATE.md has no ```diff block"
    assert shown.group(1) == diff
    added = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert sum("progress." in line for line in added) == 3 and "+from elastic_chaos.trainer import progress" in added


def test_a_node_log_tail_leaves_out_torchruns_own_closing_words():
    from elastic_chaos.watchers.tails import script_output
    log = ["I1122 14:17:05.100000 31452 torch/x.py:1] Starting worker group", "loading shards",
           "Traceback (most recent call last):", '  File "train.py", line 4, in <module>',
           "FileNotFoundError: shard-0", "E1122 14:17:11.200000 31452 api.py:1002] failed (exitcode: 1)",
           "Traceback (most recent call last):", '  File "<frozen runpy>", line 198',
           '  File "/v/torch/distributed/run.py", line 1032, in <module>',
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:", "Root Cause (first observed failure):"]
    assert script_output(log) == log[1:5]
