"""The local platform: a node is a torchrun agent and everything it spawned.

These start real torchrun agents with a tiny script (no training) whose
worker also spawns a grandchild in its own session, the way data loaders
or helper daemons escape a process group.
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from elastic_chaos.errors import InjectionFailed
from elastic_chaos.events import Timeline
from elastic_chaos.host import procs
from elastic_chaos.host.procs import is_running
from elastic_chaos.platforms.api import NodeState
from elastic_chaos.platforms.local.platform import LocalOptions, LocalPlatform
from elastic_chaos.spec import JobSpec

pytestmark = pytest.mark.slow

WORKER = """
import os, subprocess, sys, time
# escape the agent's session, as torchrun's own workers do
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
print("worker up", os.getpid(), flush=True)
time.sleep(300)
"""


def wait_until(pred, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def platform_factory(tmp_path):
    made: list[LocalPlatform] = []

    def make(**options) -> tuple[LocalPlatform, JobSpec]:
        script = tmp_path / "worker.py"
        script.write_text(WORKER)
        # etcd-v2: with c10d, whichever agent bound the store port first hosts the
        # rendezvous, and killing it would take the other node down too
        job = JobSpec(nodes="1:2", script=(str(script),))
        timeline = Timeline(tmp_path / "timeline.jsonl")
        platform = LocalPlatform(timeline, tmp_path, LocalOptions(**options))
        made.append(platform)
        platform.start(job)
        return platform, job

    yield make
    for p in made:
        p.stop()
        p.timeline.close()


def node_pids(platform: LocalPlatform, node: str, at_least: int) -> set[int]:
    tag = platform.node_tag(node)

    def enough() -> set[int] | None:
        pids = procs.tagged_pids(tag)
        return pids if len(pids) >= at_least else None

    return wait_until(enough, what=f"{at_least} processes on {node}")


def test_a_node_kill_leaves_no_process_of_that_node_alive(platform_factory):
    platform, _ = platform_factory(replace_lost_nodes=False)
    victim, survivor = "node-1", "node-0"
    # agent + worker + the worker's escaped grandchild
    pids = node_pids(platform, victim, 3)
    other = node_pids(platform, survivor, 3)
    agent = next(n.agent_pid for n in platform.nodes() if n.name == victim)
    # some of them left the agent's session: killing its process group would miss them
    assert any(os.getsid(p) != agent for p in pids)

    hit = platform.kill_node(victim)

    assert set(hit.pids) >= pids
    assert [p for p in pids if is_running(p)] == []
    assert all(is_running(p) for p in other)               # the other node is untouched
    assert {n.name: n.state for n in platform.nodes()}[victim] is NodeState.LOST


def test_stop_takes_down_every_node_and_is_idempotent(platform_factory):
    before = set(Path(tempfile.gettempdir()).glob("torchelastic_*"))
    platform, _ = platform_factory(replace_lost_nodes=False)
    pids = node_pids(platform, "node-0", 3) | node_pids(platform, "node-1", 3)
    platform.stop()
    platform.stop()
    assert [p for p in pids if is_running(p)] == []
    # each agent's own folder (torch: a torchelastic_* folder in the system temp directory, never removed)
    # lies beside its node's log, in the run's folder
    assert set(Path(tempfile.gettempdir()).glob("torchelastic_*")) <= before
    assert (platform.logs_dir / "node-0.torchelastic").is_dir() and (platform.logs_dir / "node-1.torchelastic").is_dir()


def test_a_lost_node_is_replaced_after_the_provisioning_delay(platform_factory):
    platform, _ = platform_factory(replace_lost_nodes=True, provisioning_delay_s=1.0)
    node_pids(platform, "node-1", 2)
    hit = platform.kill_node("node-1")
    new = wait_until(lambda: [n for n in platform.nodes() if n.replaces == "node-1"],
                     what="a replacement node")[0]
    assert new.name == "node-2" and new.state is NodeState.RUNNING
    assert new.started_at - hit.at >= 1.0


def test_without_replacement_nothing_is_provisioned(platform_factory):
    platform, _ = platform_factory(replace_lost_nodes=False)
    node_pids(platform, "node-1", 2)
    platform.kill_node("node-1")
    time.sleep(1.0)
    assert [n.name for n in platform.alive_nodes()] == ["node-0"]
    assert not platform.replacement_pending()


def test_hitting_a_dead_node_is_a_failed_injection(platform_factory):
    platform, _ = platform_factory(replace_lost_nodes=False)
    node_pids(platform, "node-1", 2)
    platform.kill_node("node-1")
    with pytest.raises(InjectionFailed, match="node-1 is lost"):
        platform.kill_node("node-1")
    with pytest.raises(InjectionFailed, match="no node named node-9"):
        platform.kill_node("node-9")


# -- issue 15: the job's own listeners (finding 7), a run's own evidence (finding 1) -------------
@pytest.fixture
def training_job(tmp_path):
    """The reference trainer on two local nodes (etcd-v2, host networking), stopped afterwards."""
    timeline = Timeline(tmp_path / "timeline.jsonl")
    platform = LocalPlatform(timeline, tmp_path, LocalOptions(replace_lost_nodes=False,
                                                              state_dir=tmp_path / "state"))
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    (nodes / "node-0.log").write_text('ELASTIC_CHAOS {"ev":"step","t":1,"rank":0,"step":999}\n')  # a stale log
    platform.start(JobSpec(nodes="2:2", trainer_args=("--step-time", "0.05")))
    yield platform
    platform.stop()
    timeline.close()


def steps_of(log) -> list[dict]:
    import json
    return [json.loads(line.split("ELASTIC_CHAOS ", 1)[1]) for line in log.read_text().splitlines()
            if '"ev":"step"' in line]


def test_no_process_of_a_running_job_listens_on_every_interface(training_job):
    from listening import on_every_interface
    platform = training_job
    logs = platform.node_logs()
    wait_until(lambda: all(any(s["step"] >= 5 and s["step"] != 999 for s in steps_of(p)) for p in logs.values()),
               timeout=120, what="both nodes training")
    job = {pid: f"{node} process" for node in logs for pid in platform.node_pids(node)}
    assert platform.etcd is not None and platform.etcd.pid is not None
    job[platform.etcd.pid] = "etcd"
    assert len(job) >= 5                                   # etcd, two agents, two workers
    assert on_every_interface(job) == {}


def test_a_node_log_is_written_fresh_not_appended_to(training_job):
    log = training_job.node_logs()["node-0"]
    wait_until(lambda: steps_of(log), timeout=120, what="node-0 training")
    assert 999 not in [s["step"] for s in steps_of(log)]
