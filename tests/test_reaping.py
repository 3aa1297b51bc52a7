"""What a killed runner left is reaped, by tag and start time, never by name, and said
(issue 15, finding 3): the run's watchdog at once, a later run or `elastic-chaos reap` after.

Stand-ins for a run's processes are plain sleepers carrying the run's tag in their
environment; a stand-in runner is a process that is started and killed, so its PID
and start time are those of a dead runner.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from elastic_chaos.errors import SpecError
from elastic_chaos.events import RunnerEv, Timeline
from elastic_chaos.host import procs
from elastic_chaos.host.cgroup import NodeCgroups, find_root
from elastic_chaos.host.registry import Registry, RunRecord
from elastic_chaos.platforms.local.guard import RunGuard

HERE = Path(__file__).resolve().parent.parent
SLEEP = [sys.executable, "-c", "import time; time.sleep(300)"]


@pytest.fixture
def state(tmp_path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def spawned():
    """Start processes for a test and SIGKILL whatever of them is left afterwards."""
    started: list[subprocess.Popen[bytes]] = []

    def spawn(cmd: list[str] = SLEEP, tag: str | None = None, **kw) -> subprocess.Popen[bytes]:
        env = {**os.environ, **({procs.TAG_VAR: tag} if tag else {})}
        proc = subprocess.Popen(cmd, env=env, start_new_session=True, **kw)
        started.append(proc)
        return proc

    yield spawn
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL) if procs.group_of(proc.pid) == proc.pid else proc.kill()
        proc.wait(10)


def dead_runner(spawn) -> tuple[int, int]:
    """(PID, start time) of a runner that is gone."""
    proc = spawn()
    start = procs.start_time(proc.pid)
    assert start is not None
    proc.kill()
    proc.wait(10)
    return proc.pid, start


def record(state: Path, run_id: str, runner: tuple[int, int], report: Path, **kw) -> RunRecord:
    path = state / "local-runs" / f"{run_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = RunRecord(run_id=run_id, runner_pid=runner[0], runner_start=runner[1], report_dir=str(report),
                    started_at=time.time(), path=path, **kw)
    path.write_text(json.dumps(rec.to_json()))
    return rec


def gone(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> bool:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


def test_a_dead_runs_tagged_processes_and_etcd_group_are_reaped_and_said(state, tmp_path, spawned):
    runner = dead_runner(spawned)
    agent = spawned(tag="chaos-dead/node-0")
    worker = spawned(tag="chaos-dead/node-0")
    etcd = spawned(["/bin/sh", "-c", "sleep 300 & wait"], tag="chaos-dead/etcd")   # forks: a group of two
    time.sleep(0.3)
    etcd_child = next(iter(procs.group_members(etcd.pid) - {etcd.pid}))
    record(state, "chaos-dead", runner, tmp_path / "r", etcd=(etcd.pid, procs.start_time(etcd.pid)))

    reaped = Registry(state).reap_dead(by="this run")

    assert gone(agent) and gone(worker) and gone(etcd) and not procs.is_running(etcd_child)
    assert [r.run_id for r in reaped] == ["chaos-dead"]
    said = reaped[0].describe()
    assert "chaos-dead" in said and f"PID {runner[0]}, is gone" in said
    assert str(agent.pid) in said and str(worker.pid) in said and "etcd" in said
    assert Registry(state).records() == []                            # forgotten once reaped


def test_nothing_is_reaped_by_name_or_from_before_the_runner(state, tmp_path, spawned):
    older = spawned(tag="chaos-dead/node-0")       # tagged, but started before the runner: not its child
    time.sleep(0.05)
    runner = dead_runner(spawned)
    lookalike = spawned()                          # the same command line, untagged
    other_run = spawned(tag="chaos-other/node-0")  # another run's
    record(state, "chaos-dead", runner, tmp_path / "r")

    Registry(state).reap_dead(by="this run")

    assert older.poll() is None and lookalike.poll() is None and other_run.poll() is None


def test_a_live_runs_record_is_left_alone(state, tmp_path, spawned):
    me = (os.getpid(), procs.start_time(os.getpid()))
    node = spawned(tag="chaos-live/node-0")
    record(state, "chaos-live", me, tmp_path / "r")          # its runner (this process) is alive
    assert Registry(state).reap_dead(by="this run") == []
    assert node.poll() is None
    assert [r.run_id for r in Registry(state).records()] == ["chaos-live"]


def test_a_reused_runner_pid_does_not_keep_a_dead_run_alive(state, tmp_path, spawned):
    me = os.getpid()
    node = spawned(tag="chaos-reused/node-0")
    record(state, "chaos-reused", (me, (procs.start_time(me) or 0) + 1), tmp_path / "r")  # same PID, other start
    assert [r.run_id for r in Registry(state).reap_dead(by="this run")] == ["chaos-reused"]
    assert gone(node)


def test_a_live_run_id_is_refused_and_a_dead_one_is_reaped_to_make_room(state, tmp_path, spawned):
    registry = Registry(state)
    mine = registry.register("chaos-same", tmp_path / "a")
    with pytest.raises(SpecError, match="in use by a live run"):
        registry.register("chaos-same", tmp_path / "b")
    registry.remove(mine)

    runner = dead_runner(spawned)
    node = spawned(tag="chaos-dead/node-0")
    record(state, "chaos-dead", runner, tmp_path / "r")
    again = registry.register("chaos-dead", tmp_path / "c")
    assert gone(node) and again.runner_pid == os.getpid()


def test_a_run_id_that_is_not_a_plain_name_is_refused(state, tmp_path):
    with pytest.raises(SpecError, match="run id"):
        Registry(state).register("../../etc/x", tmp_path)


def test_a_new_run_reaps_dead_runs_first_and_says_so_on_its_timeline(state, tmp_path, spawned, caplog):
    runner = dead_runner(spawned)
    node = spawned(tag="chaos-before/node-1")
    record(state, "chaos-before", runner, tmp_path / "old")
    timeline = Timeline(tmp_path / "timeline.jsonl")
    guard = RunGuard(timeline, tmp_path, "chaos-now", state)
    try:
        guard.open()
        assert gone(node)
        events = timeline.select(RunnerEv.REAPED)
        assert [e.data.run_id for e in events] == ["chaos-before"]
        assert "chaos-before" in caplog.text and str(node.pid) in caplog.text
    finally:
        guard.close()
        timeline.close()
    assert Registry(state).records() == []


@pytest.mark.needs_root
def test_a_dead_runs_cgroups_are_emptied_and_removed(state, tmp_path, spawned):
    root = find_root()
    if root is None:
        pytest.skip("no writable cgroup v2 hierarchy with cgroup.kill")
    run_id = f"chaos-cg{uuid.uuid4().hex[:6]}"
    groups = NodeCgroups(root, run_id)
    runner = dead_runner(spawned)
    untagged = spawned(groups.wrap("node-0", SLEEP))           # found only through its cgroup
    time.sleep(0.3)
    record(state, run_id, runner, tmp_path / "r", cgroups=str(groups.dir))
    (reaped,) = Registry(state).reap_dead(by="this run")
    assert gone(untagged)
    assert not groups.dir.exists() and f"cgroup {groups.dir}" in reaped.removed


def test_a_recorded_cgroup_outside_ours_is_never_touched(state, tmp_path, spawned):
    elsewhere = tmp_path / "sys" / "fs" / "cgroup" / "elastic-chaos" / "chaos-x"   # not our TOP
    (elsewhere / "node-0").mkdir(parents=True)
    record(state, "chaos-x", dead_runner(spawned), tmp_path / "r", cgroups=str(elsewhere))
    Registry(state).reap_dead(by="this run")
    assert (elsewhere / "node-0").is_dir()


# -- the watchdog: the runner's death, however it dies ------------------------------------
RUNNER = """
import os, subprocess, sys, time
from pathlib import Path
from elastic_chaos.host.registry import Registry
from elastic_chaos.host.watchdog import Watchdog
state, report, run_id = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
rec = Registry(state).register(run_id, report)
dog = Watchdog(rec.path, report / "watchdog.log").start()
env = {**os.environ, "ELASTIC_CHAOS_NODE": run_id + "/node-0"}
kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], env=env, start_new_session=True)
        for _ in range(2)]
print(dog.pid, *[k.pid for k in kids], flush=True)
if sys.argv[4] == "release":
    for k in kids:
        k.kill(); k.wait()
    dog.release()
    Registry(state).remove(rec)
    print("released", flush=True)
time.sleep(300)
"""


def start_runner(state: Path, report: Path, run_id: str, mode: str = "die") -> tuple[subprocess.Popen[str], list[int]]:
    report.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(RUNNER), str(state), str(report), run_id, mode],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(HERE)})
    assert proc.stdout is not None
    return proc, [int(p) for p in proc.stdout.readline().split()]


def wait_gone(pids: list[int], timeout: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(procs.is_running(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if procs.is_running(p)]


def finish(runner: subprocess.Popen[str], pids: list[int]) -> None:
    runner.kill()
    runner.wait(10)
    assert runner.stdout is not None
    runner.stdout.close()
    for pid in pids:
        if procs.is_running(pid):
            os.kill(pid, signal.SIGKILL)


def test_the_watchdog_stops_a_runs_processes_when_its_runner_is_killed(state, tmp_path):
    report = tmp_path / "r"
    runner, (dog, *kids) = start_runner(state, report, "chaos-wd")
    try:
        assert all(procs.is_running(k) for k in kids)
        runner.kill()                                         # SIGKILL: the runner does nothing more
        assert wait_gone(kids) == []                          # the workers of a node, in their own sessions
        assert wait_gone([dog]) == []                         # and the watchdog is done
        reaped = [json.loads(line) for line in (report / "timeline.jsonl").read_text().splitlines()]
        assert [(e["source"], e["kind"], e["data"]["by"]) for e in reaped] == [("runner", "reaped", "its watchdog")]
        assert Registry(state).records() == []
        out = subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "reap", "--state-dir", str(state)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "chaos-wd" in out.stdout and "its watchdog killed" in out.stdout
        assert str(kids[0]) in out.stdout
    finally:
        finish(runner, [dog, *kids])


def test_a_released_watchdog_exits_without_touching_anything(state, tmp_path):
    report = tmp_path / "r"
    runner, (dog, *_) = start_runner(state, report, "chaos-rel", "release")
    try:
        assert runner.stdout is not None and runner.stdout.readline().strip() == "released"
        assert wait_gone([dog]) == []
        assert not (report / "timeline.jsonl").exists()
        assert list((state / "local-runs").iterdir()) == []
    finally:
        finish(runner, [dog])


def test_reap_stops_what_a_runner_and_its_watchdog_both_killed_left(state, tmp_path):
    report = tmp_path / "r"
    runner, (dog, *kids) = start_runner(state, report, "chaos-both")
    try:
        os.kill(dog, signal.SIGKILL)                          # the whole session was killed, say
        runner.kill()
        runner.wait(10)
        time.sleep(0.5)
        assert all(procs.is_running(k) for k in kids)        # left behind: nothing watches them now
        dry = subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "reap", "--dry-run", "--state-dir",
                              str(state)], capture_output=True, text=True, timeout=60)
        assert dry.returncode == 0 and "would reap run chaos-both" in dry.stdout
        assert all(procs.is_running(k) for k in kids)
        out = subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "reap", "--state-dir", str(state)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "chaos-both" in out.stdout and "elastic-chaos reap killed node-0" in out.stdout
        assert wait_gone(kids) == []
        again = subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "reap", "--state-dir", str(state)],
                               capture_output=True, text=True, timeout=60)
        assert again.returncode == 0 and "nothing to reap" in again.stdout
    finally:
        finish(runner, [dog, *kids])
