"""The local platform's slow node and hung worker, on real processes: a duty cycle makes a
paced process take factor times as long (cgroup freeze as root, signals otherwise), a hung
worker is stopped and continued only while it is still the same process."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from elastic_chaos.errors import SpecError
from elastic_chaos.faults.slow import Straggler
from elastic_chaos.host import procs
from elastic_chaos.host.cgroup import NodeCgroups, find_root
from elastic_chaos.platforms.local.hung import HungWorkers
from elastic_chaos.platforms.local.slow import CgroupSwitch, SignalSwitch
from elastic_chaos.platforms.slowdown import DutyCycle, Slowdowns

PACED = ("import time; from elastic_chaos.trainer.pacing import pace; t=time.monotonic(); pace({s}); "
         "print(time.monotonic()-t)")


def paced(seconds: float, tag: str, cmd: list[str] | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent), procs.TAG_VAR: tag}
    return subprocess.Popen([*(cmd or []), sys.executable, "-c", PACED.format(s=seconds)], stdout=subprocess.PIPE,
                            text=True, env=env)


def wait_started(tag: str) -> None:
    deadline = time.monotonic() + 10
    while not procs.tagged_pids(tag) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # past the interpreter's start-up, inside pace


def test_a_signal_duty_cycle_at_factor_2_doubles_a_paced_process():
    tag = f"test-{uuid.uuid4().hex[:6]}/node-0"
    proc = paced(2.0, tag)
    wait_started(tag)
    cycle = DutyCycle("node-0", 2.0, 0.2, SignalSwitch(tag)).start()
    out, _ = proc.communicate(timeout=30)
    cycle.halt()
    assert 3.3 <= float(out) <= 4.6, f"2 s of running time at half speed took {out.strip()} s"
    assert cycle.cycles >= 8


@pytest.mark.skipif(find_root() is None, reason="needs root and a cgroup v2 hierarchy with cgroup.freeze")
def test_a_cgroup_duty_cycle_at_factor_2_doubles_a_paced_process():
    root = find_root()
    assert root is not None
    run = f"test-slow-{uuid.uuid4().hex[:6]}"
    cgroups = NodeCgroups(root, run)
    try:
        proc = paced(2.0, f"{run}/node-0", cgroups.wrap("node-0", []))
        wait_started(f"{run}/node-0")
        cycle = DutyCycle("node-0", 2.0, 0.2, CgroupSwitch(cgroups, "node-0")).start()
        out, _ = proc.communicate(timeout=30)
        cycle.halt()
        assert 3.3 <= float(out) <= 4.6, f"2 s of running time at half speed took {out.strip()} s"
        assert not cgroups.is_frozen("node-0"), "the node is left running"
    finally:
        cgroups.kill_all()
        cgroups.remove()


def test_a_cycle_over_a_node_that_is_gone_ends_and_says_why():
    tag = f"test-{uuid.uuid4().hex[:6]}/node-0"
    slow = Slowdowns()
    hit = slow.start("node-0", 2.0, 0.2, SignalSwitch(tag))
    assert hit.action == "sigstop/sigcont duty cycle"
    time.sleep(0.4)
    restored = slow.restore("node-0")
    assert "gone" in str(restored.detail.get("ended"))
    assert slow.restore("node-0").action == "nothing-to-restore", "idempotent"


def test_a_hung_worker_is_stopped_and_continued():
    tag = f"test-{uuid.uuid4().hex[:6]}/node-0"
    env = {**os.environ, procs.TAG_VAR: tag, "LOCAL_RANK": "0"}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        hung = HungWorkers()
        wait_started(tag)
        hit = hung.hang("node-0", tag, os.getpid(), 0)
        assert hit.pids == (proc.pid,) and _state(proc.pid) == "T"
        assert hung.resume("node-0", proc.pid).action == "sigcont-worker" and _state(proc.pid) != "T"
        assert hung.resume("node-0", proc.pid).action == "nothing-to-resume", "idempotent"
    finally:
        proc.kill()
        proc.wait()


def test_a_worker_gone_meanwhile_is_nothing_to_resume():
    tag = f"test-{uuid.uuid4().hex[:6]}/node-0"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                            env={**os.environ, procs.TAG_VAR: tag, "LOCAL_RANK": "0"})
    hung = HungWorkers()
    wait_started(tag)
    hung.hang("node-0", tag, os.getpid(), 0)
    proc.kill()
    proc.wait()
    assert hung.resume("node-0", proc.pid).action == "nothing-to-resume"


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_stop_too_short_to_tell_from_a_scheduling_delay_is_refused():
    with pytest.raises(SpecError, match="--period >= 0.55"):
        Straggler(factor=1.1, period_s=0.2)
    assert abs(Straggler(factor=1.1).cycle_s - 0.55) < 1e-9
    assert Straggler(factor=2.0).cycle_s == 0.2


def test_the_catalog_lists_the_new_faults(capsys):
    from elastic_chaos.cli.main import main
    assert main(["faults"]) == 0
    out = capsys.readouterr().out
    assert all(f"\n  {name} " in out for name in ("straggler", "hung-rank", "replay"))
