"""Children that die with the runner, and an etcd stopped by process group (issue 15, finding 3)."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from elastic_chaos.host import procs
from elastic_chaos.host.etcd import EtcdServer, find_binary

HERE = Path(__file__).resolve().parent.parent


def wait_for(pred, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def start_runner(code: str) -> tuple[subprocess.Popen[str], list[int]]:
    """A stand-in runner running ``code``; it prints the PIDs it wants checked, one line."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(HERE)})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, [int(p) for p in line.split()]


def test_a_tied_child_started_from_a_thread_that_ended_lives_until_its_runner_dies():
    runner, (child,) = start_runner("""
        import threading, time
        from elastic_chaos.host import lifeline
        box = []
        t = threading.Thread(target=lambda: box.append(lifeline.popen(["sleep", "300"])))
        t.start(); t.join()
        time.sleep(0.5)   # the thread that asked is gone; the child must not be
        print(box[0].pid, flush=True)
        time.sleep(300)
    """)
    try:
        assert procs.is_running(child)
        runner.kill()                                   # SIGKILL: no finally, no atexit
        runner.wait(10)
        wait_for(lambda: not procs.is_running(child), 10, "the tied child to die with its runner")
    finally:
        stop(runner)
        if procs.is_running(child):
            os.kill(child, signal.SIGKILL)


def stop(runner: subprocess.Popen[str]) -> None:
    runner.kill()
    runner.wait(10)
    if runner.stdout is not None:
        runner.stdout.close()


@pytest.fixture
def forking_etcd(tmp_path: Path) -> Path:
    """A fake etcd that forks: the real one runs as its child (a wrapper script, a supervisor)."""
    fake = tmp_path / "etcd"
    fake.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then exec {find_binary()} --version; fi\n'
                    f'{find_binary()} "$@" &\nwait\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return fake


def test_stopping_an_etcd_that_forks_leaves_no_child(tmp_path, forking_etcd):
    server = EtcdServer(tmp_path / "data", binary=forking_etcd)
    server.start()
    leader = server.pid
    assert leader is not None
    group = wait_for(lambda: procs.group_members(leader) if len(procs.group_members(leader)) >= 2 else None,
                     what="the fake etcd's child")
    try:
        server.stop()
        assert [p for p in group if procs.is_running(p)] == []
    finally:
        for pid in group:
            if procs.is_running(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_paused_etcd_that_forks_is_paused_whole_and_resumes(tmp_path, forking_etcd):
    with EtcdServer(tmp_path / "data", binary=forking_etcd) as server:
        assert server.pid is not None
        group = wait_for(lambda: procs.group_members(server.pid) if len(procs.group_members(server.pid)) >= 2
                         else None, what="the fake etcd's child")
        server.pause()

        def states() -> dict[int, str]:
            return {p: Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] for p in group}

        # a signal is delivered asynchronously: wait for the kernel to have stopped them
        stopped = wait_for(lambda: set(states().values()) == {"T"}, 10, "the whole group to be stopped")
        assert stopped                                     # the real etcd (the child) is stopped too
        server.resume()
    assert [p for p in group if procs.is_running(p)] == []


def test_etcd_dies_with_the_process_that_started_it(tmp_path):
    runner, (etcd,) = start_runner(f"""
        import time
        from pathlib import Path
        from elastic_chaos.host.etcd import EtcdServer
        server = EtcdServer(Path({str(tmp_path / "data")!r}))
        server.start()
        print(server.pid, flush=True)
        time.sleep(300)
    """)
    try:
        assert procs.is_running(etcd)
        runner.kill()
        runner.wait(10)
        wait_for(lambda: not procs.is_running(etcd), 10, "etcd to die with its runner")
    finally:
        stop(runner)
        if procs.is_running(etcd):
            os.kill(etcd, signal.SIGKILL)
