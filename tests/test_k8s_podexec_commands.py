"""The shell commands the Kubernetes platform runs inside a pod (pods/exec), run here by ``sh``
against real processes: the same /proc the container shows its own processes in."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from elastic_chaos.platforms.kubernetes.podexec import hang_worker_command, resume_worker_command

# The commands scan the whole /proc (in a pod that is the pod's): here that is the host's, where
# another test's elastic job may run workers with LOCAL_RANK 0 or 1 -- a rank no job uses.
RANK = 4093
# A worker as torchrun starts it (LOCAL_RANK in its environment) with a child that inherits the
# variable, like a data-loader process: the command must stop the worker, not its child.
WORKER = ("import subprocess, sys, time; "
          "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
          "print(c.pid, flush=True); time.sleep(60)")


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]


def sh(script: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LOCAL_RANK"}
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30, env=env)


@pytest.fixture
def worker():
    env = {**os.environ, "LOCAL_RANK": str(RANK)}
    proc = subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    yield proc, child
    for pid in (child, proc.pid):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    proc.wait(10)
    proc.stdout.close()


def test_hang_stops_the_topmost_worker_of_that_local_rank_and_resume_continues_it(worker):
    proc, child = worker
    done = sh(hang_worker_command(RANK))
    assert done.returncode == 0, done.stderr
    pid, started = done.stdout.split()
    assert int(pid) == proc.pid
    assert state(proc.pid) == "T" and state(child) != "T"
    resumed = sh(resume_worker_command(proc.pid, started))
    assert resumed.returncode == 0 and resumed.stdout.strip() == "resumed"
    deadline = time.monotonic() + 5
    while state(proc.pid) == "T" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert state(proc.pid) != "T"


def test_resume_leaves_alone_a_pid_that_is_another_process_now(worker):
    proc, _ = worker
    done = sh(hang_worker_command(RANK))
    pid, started = done.stdout.split()
    other = sh(resume_worker_command(int(pid), str(int(started) + 1)))
    assert other.returncode == 0 and other.stdout == ""
    assert state(proc.pid) == "T"
    sh(resume_worker_command(int(pid), started))


def test_no_worker_of_that_local_rank_exits_3(worker):
    assert sh(hang_worker_command(RANK + 1)).returncode == 3
    assert sh(resume_worker_command(999_999_999, "1")).returncode == 0   # gone: nothing to resume
