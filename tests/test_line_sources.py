"""Whose line it is (issue 36, "What a script prints"): the agent's words printed by a script are no
agent event, a script's print of an error is no worker error, and a worker's own file is read, timed
to its own writes, instead of its agent's delayed copy (elastic_chaos.watchers.sources).

The agent runs its workers with ``--redirects 3 --tee 3``: each worker's stdout and stderr go to
``<log dir>/<run>/attempt_<N>/<local rank>/{stdout,stderr}.log`` and the agent copies their lines,
prefixed ``[default<local rank>]:``, into the node log. The logs here are written as torch writes them.
"""
from __future__ import annotations

import datetime
import shutil
import threading
import time
from pathlib import Path

import pytest

from elastic_chaos.events import AgentEv, Event, ProgressEv, Source, Timeline, of
from elastic_chaos.platforms.worker_logs import TEE_FLAGS, WorkerLogFolder, pod_tee_args
from elastic_chaos.spec import JobSpec, Observation
from elastic_chaos.watchers.line_times import LINE_MAX
from elastic_chaos.watchers.logs import LogFollower
from elastic_chaos.watchers.script_lines import ScriptLines
from elastic_chaos.watchers.tails import script_output

AGENT = "torch/distributed/elastic/agent/server/api.py"


def glog(message: str, where: str = AGENT, level: str = "I") -> str:
    """A line as torch's elastic agent writes it (local time, as the local platform's nodes do)."""
    return f"{level}{datetime.datetime.now():%m%d %H:%M:%S.%f} 4242 {where}:942] {message}"


STARTED = glog("[default] Starting worker group")
RESULT = [glog("[default] Rendezvous complete for workers. Result:"), glog("  restart_count=0"),
          glog("  group_rank=1"), glog("  group_world_size=2"), glog("  local_ranks=[0, 1]"),
          glog("  global_ranks=[2, 3]"), glog(""), STARTED]
AGENTS_WORDS = {
    "gave up": "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "glog": glog("[default] Worker group FAILED. 3/3 attempts left; will restart worker group"),
    "closed": "torch.distributed.elastic.rendezvous.api.RendezvousClosedError: rendezvous 'x' is closed",
}
"""What the agent says when it gives up, sees its workers fail, finds its rendezvous closed."""
DISK_FULL = "RuntimeError: [Errno 28] No space left on device"
TRACEBACK = ["Traceback (most recent call last):", '  File "train.py", line 60, in save',
             "    torch.save(state, path)", DISK_FULL]


def agent_events(events: list[Event]) -> list[Event]:
    return [e for e in events if e.type.source == Source.AGENT]


def follow(tmp_path: Path, node_log: list[str], folder: WorkerLogFolder | None = None,
           observe: Observation | None = None, nproc: int = 1) -> list[Event]:
    """Every event a follower reads from a node log (and the workers' own files, where offered)."""
    path = tmp_path / "nodes" / "node-0.log"
    path.parent.mkdir(exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in node_log))
    tl = Timeline()
    follower = LogFollower(tl, lambda: {"node-0": path}, ScriptLines(observe, nproc) if observe else None,
                           worker_logs=(lambda: {"node-0": folder.files()}) if folder is not None else None)
    follower.poll()
    follower.finish()
    return tl.events()


def worker_files(tmp_path: Path, stdout: list[str] = (), stderr: list[str] = (), *, attempt: int = 0,
                 local_rank: int = 0, folder: WorkerLogFolder | None = None) -> WorkerLogFolder:
    """A node's ``--log-dir`` as torch lays it out, one worker's files written."""
    folder = folder or WorkerLogFolder(tmp_path / "nodes" / "node-0.torchelastic")
    own = folder.root / "chaos-run_k2x9" / f"attempt_{attempt}" / str(local_rank)
    own.mkdir(parents=True, exist_ok=True)
    (own / "stdout.log").write_text("".join(f"{line}\n" for line in stdout))
    (own / "stderr.log").write_text("".join(f"{line}\n" for line in stderr))
    return folder


def copies(lines: list[str], local_rank: int = 0) -> list[str]:
    """The agent's copies of a worker's lines in its node log."""
    return [f"[default{local_rank}]:{line}" for line in lines]


# -- the agent's words from a script -------------------------------------------------------------

@pytest.mark.parametrize("words", list(AGENTS_WORDS), ids=list(AGENTS_WORDS))
def test_the_agents_words_printed_by_a_worker_make_no_agent_event_in_a_pods_log(tmp_path, words):
    # a pod's log: the copies are all there is of the workers' lines
    assert [e.type for e in agent_events(follow(tmp_path, [STARTED, *copies([AGENTS_WORDS[words]])]))] == [
        AgentEv.WORKERS_STARTING]


@pytest.mark.parametrize("words", list(AGENTS_WORDS), ids=list(AGENTS_WORDS))
def test_the_agents_words_printed_by_a_worker_make_no_agent_event_from_its_own_file(tmp_path, words):
    folder = worker_files(tmp_path, stdout=[AGENTS_WORDS[words]], stderr=[AGENTS_WORDS[words]])
    events = follow(tmp_path, [STARTED, *copies([AGENTS_WORDS[words]])], folder)
    assert [e.type for e in agent_events(events)] == [AgentEv.WORKERS_STARTING]


@pytest.mark.parametrize("words,kind", [("gave up", AgentEv.AGENT_GAVE_UP), ("glog", AgentEv.WORKER_GROUP_FAILED),
                                        ("closed", AgentEv.RENDEZVOUS_ERROR)], ids=["gave up", "glog", "closed"])
def test_the_same_words_from_the_agent_itself_are_its_events(tmp_path, words, kind):
    folder = worker_files(tmp_path, stdout=["epoch 1"])
    for log in ([STARTED, *copies(["epoch 1"]), AGENTS_WORDS[words]], [STARTED, AGENTS_WORDS[words]]):
        for offered in (folder, None):
            assert kind in [e.type for e in agent_events(follow(tmp_path, log, offered))]


def test_the_agents_words_in_a_later_part_of_a_workers_long_copy_are_still_the_workers(tmp_path):
    # a line past LINE_MAX is handed on in parts: only the first carries the copy's prefix
    long_copy = "[default0]:" + "x" * (LINE_MAX + 10) + AGENTS_WORDS["gave up"]
    for offered in (worker_files(tmp_path), None):
        assert [e.type for e in agent_events(follow(tmp_path, [STARTED, long_copy], offered))] == [
            AgentEv.WORKERS_STARTING]


# -- a worker's error is the end of a traceback on its stderr --------------------------------------

def test_an_error_printed_on_stdout_is_no_worker_error(tmp_path):
    folder = worker_files(tmp_path, stdout=[DISK_FULL, *TRACEBACK])   # even a whole traceback, on stdout
    assert of(follow(tmp_path, [STARTED], folder), ProgressEv.WORKER_ERROR) == []


def test_the_last_line_of_a_traceback_on_stderr_is_the_workers_error_with_its_root_cause(tmp_path):
    folder = worker_files(tmp_path, stderr=[DISK_FULL, "some warning", *TRACEBACK], local_rank=1)
    (error,) = of(follow(tmp_path, RESULT, folder), ProgressEv.WORKER_ERROR)
    assert error.data.root == "disk_full" and error.data.message == "[Errno 28] No space left on device"
    assert error.data.rank == 3           # local rank 1 of the round whose global ranks are [2, 3]


def test_torchs_rank_prefixed_traceback_is_a_workers_error_with_its_rank(tmp_path):
    lines = [f"[rank5]: {line}" for line in [*TRACEBACK[:-1], "RuntimeError: Connection closed by peer"]]
    (error,) = of(follow(tmp_path, [STARTED], worker_files(tmp_path, stderr=lines)), ProgressEv.WORKER_ERROR)
    assert error.data.rank == 5 and error.data.cause == "connection_closed"


def test_in_a_pods_log_an_error_line_outside_a_traceback_is_no_worker_error(tmp_path):
    assert of(follow(tmp_path, [STARTED, *copies([DISK_FULL])]), ProgressEv.WORKER_ERROR) == []
    (error,) = of(follow(tmp_path, [STARTED, *copies(TRACEBACK, local_rank=1)]), ProgressEv.WORKER_ERROR)
    assert error.data.root == "disk_full"


def test_the_agents_own_traceback_is_no_workers_error(tmp_path):
    assert of(follow(tmp_path, [STARTED, *copies(["epoch 1"]), *TRACEBACK]), ProgressEv.WORKER_ERROR) == []


# -- the workers' own files --------------------------------------------------------------------------

def test_the_copies_are_skipped_where_the_workers_files_are_read(tmp_path):
    folder = worker_files(tmp_path, stdout=["step 1", "step 2"])
    events = follow(tmp_path, [STARTED, *copies(["step 1", "step 2", "step 3"])], folder,
                    Observation(progress_regex=r"step (?P<step>\d+)"))
    assert [e.data.step for e in of(events, ProgressEv.STEP)] == [1, 2]      # step 3 was only a copy


def test_several_local_ranks_printing_the_same_steps_make_one_event_each(tmp_path):
    folder = worker_files(tmp_path, stdout=["step 1", "step 2"])
    worker_files(tmp_path, stdout=["step 1", "step 2"], local_rank=1, folder=folder)
    events = follow(tmp_path, RESULT, folder, Observation(progress_regex=r"step (?P<step>\d+)"), nproc=2)
    steps = of(events, ProgressEv.STEP)
    assert [e.data.step for e in steps] == [1, 2] and steps[0].data.world_size == 4
    assert steps[0].data.restart_count == 0


def test_a_restarts_new_attempt_folder_is_found_as_it_appears(tmp_path):
    folder = worker_files(tmp_path, stdout=["step 1"])
    assert [(w.attempt, w.stream) for w in folder.files()] == [(0, "stderr"), (0, "stdout")]
    worker_files(tmp_path, stdout=["step 1"], attempt=1, folder=folder)   # within the same second
    assert [(w.attempt, w.local_rank) for w in folder.files()] == [(0, 0), (0, 0), (1, 0), (1, 0)]


def steps_follower(tmp_path: Path, folder: WorkerLogFolder) -> tuple[LogFollower, Timeline, Path]:
    """A follower of a node's log and its workers' files, reading ``step N`` lines as steps."""
    node_log = tmp_path / "nodes" / "node-0.log"
    node_log.write_text(STARTED + "\n")
    tl = Timeline()
    script = ScriptLines(Observation(progress_regex=r"step (?P<step>\d+)"))
    return LogFollower(tl, lambda: {"node-0": node_log}, script, worker_logs=lambda: {"node-0": folder.files()},
                       index=False), tl, node_log


def test_a_group_restarted_in_its_reused_attempt_folder_is_read_from_its_new_files(tmp_path):
    # a membership change restarts the workers without spending a restart: torch removes attempt_0
    # and makes it anew, the same paths for new files
    folder = worker_files(tmp_path, stdout=["step 1", "step 2"])
    follower, tl, _ = steps_follower(tmp_path, folder)
    follower.poll()
    shutil.rmtree(folder.root / "chaos-run_k2x9" / "attempt_0")
    worker_files(tmp_path, stdout=["step 1", "step 2", "step 3"], folder=folder)
    follower.poll()
    follower.poll()
    follower.finish()
    assert [e.data.step for e in of(tl.events(), ProgressEv.STEP)] == [1, 2, 1, 2, 3]


def test_the_script_lines_counted_are_the_workers_not_the_agents(tmp_path):
    folder = worker_files(tmp_path, stdout=["hello"])
    path = tmp_path / "nodes" / "node-0.log"
    path.write_text("\n".join([STARTED, "agent's own plain line", *copies(["hello"])]) + "\n")
    script = ScriptLines(Observation(progress_regex=r"step (?P<step>\d+)"))
    follower = LogFollower(Timeline(), lambda: {"node-0": path}, script, worker_logs=lambda: {"node-0": folder.files()})
    follower.poll()
    follower.finish()
    assert script.lines_seen == 1


def test_regex_steps_from_a_workers_own_file_are_timed_to_their_writes_not_to_the_delayed_copy(tmp_path):
    folder = worker_files(tmp_path)
    stdout = next(w.path for w in folder.files() if w.stream == "stdout")
    follower, tl, node_log = steps_follower(tmp_path, folder)
    follower.start()
    wrote: dict[int, tuple[float, float]] = {}
    copier = []
    try:
        time.sleep(0.2)
        for n in range(1, 6):
            before = time.time()
            with open(stdout, "a") as f:
                f.write(f"step {n}\n")
            wrote[n] = (before, time.time())
            copier.append(threading.Timer(0.3, _append, (node_log, f"[default0]:step {n}\n")))  # tail_log's delay
            copier[-1].start()
            time.sleep(0.137)
        for timer in copier:
            timer.join()
        time.sleep(0.3)
    finally:
        follower.stop()
    steps = of(tl.events(), ProgressEv.STEP)
    assert [e.data.step for e in steps] == [1, 2, 3, 4, 5]          # one each: the copies were skipped
    for e in steps:
        before, after = wrote[e.data.step]
        assert e.data.written_after is not None and e.data.written_after <= after
        assert before - 0.011 <= e.t <= after + 0.05, (e.t - after)   # its own write, not the copy's 0.3 s later


def _append(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


# -- what reads the node log afterwards --------------------------------------------------------------

def test_the_scripts_last_lines_are_the_workers_copies():
    log = [STARTED, *copies(["loading shards", "epoch 1"]), "agent's own line", *TRACEBACK,
           *copies([glog("torch's own logging in the worker")])]
    assert script_output(log) == ["[default0]:loading shards", "[default0]:epoch 1"]


# -- the command lines -------------------------------------------------------------------------------

def test_every_platform_runs_its_agents_with_their_workers_output_teed(tmp_path):
    from elastic_chaos.platforms.kubernetes import manifests, statefulset
    from elastic_chaos.platforms.local.agent import agent_command
    job = JobSpec(nodes="1:2", run_id="tee")
    own = tmp_path / "node-0.torchelastic"
    cmd = agent_command(job, python="python", endpoint="127.0.0.1:29400", address="127.0.0.1", store_host=True,
                        script=(), checkpoint_dir=tmp_path, log_dir=own)
    assert " ".join(TEE_FLAGS) in " ".join(cmd) and cmd[cmd.index("--log-dir") + 1] == str(own)
    settings = manifests.KubeSettings()
    assert set(pod_tee_args()) <= set(statefulset.torchrun_args(job, settings, None))
    assert {"--redirects=3", "--tee=3", "--log_dir=/tmp/torchelastic"} <= set(manifests.elasticjob(job, settings)
                                                                               ["spec"]["replicaSpecs"]["Worker"]
                                                                               ["template"]["spec"]["containers"][0]
                                                                               ["args"])
