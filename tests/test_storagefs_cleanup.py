"""Nothing is left behind: a storage mount goes with its controller however the controller
ends (returns, raises, SIGINT, SIGTERM, SIGKILL), and a run's watchdog or `elastic-chaos
reap` takes down the mount of a run whose daemon died too, and only that one.

The controllers are real processes; the mounts are real (skipped with the reason where
they cannot be made, a failure under CI=true).
"""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from storagefs_helpers import alive, mounted, require_fuse, within

from elastic_chaos.errors import PlatformError
from elastic_chaos.events import Timeline
from elastic_chaos.host.registry import Registry
from elastic_chaos.platforms.local.guard import RunGuard
from elastic_chaos.storagefs import StorageFs

pytestmark = pytest.mark.timeout(120)
HERE = Path(__file__).resolve().parent.parent
CONTROLLER = """
import json, os, sys, time
from pathlib import Path
from elastic_chaos.events import Timeline
from elastic_chaos.platforms.local.guard import RunGuard
from elastic_chaos.storagefs import StorageFs

state, work, folder, run_id, how = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], sys.argv[5]
guard = None
if how == "guarded":
    guard = RunGuard(Timeline(work / "timeline.jsonl"), work, run_id, state_dir=state)
    guard.open()
fs = StorageFs(folder, workdir=work / "storage", ledger=guard, linger_s=3)
with fs:
    print(json.dumps({"daemon": fs.daemon_pid, "watchdog": guard.watchdog.pid if guard else None,
                      "source": fs.record.source, "sockets": str(fs._sockdir)}), flush=True)
    sys.stdin.readline()  # the test has seen the mount
    if how == "returns":
        os._exit(0)  # no unmount, no finally: only the lifeline is left
    if how == "raises":
        raise RuntimeError("the controller failed")
    time.sleep(300)
"""


@pytest.fixture
def folder(tmp_path) -> Path:
    path = tmp_path / "ckpt"
    path.mkdir()
    return path


@pytest.fixture
def controllers() -> Iterator[list[subprocess.Popen[str]]]:
    """Controller processes a test starts; whatever of them (and their daemons) is left is
    SIGKILLed by PID afterwards, and their mounts detached."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def start(controllers: list[subprocess.Popen[str]], tmp_path: Path, folder: Path, how: str,
          run_id: str = "storage-run") -> tuple[subprocess.Popen[str], dict[str, Any]]:
    require_fuse()
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CONTROLLER), str(tmp_path / "state"), str(work),
                             str(folder), run_id, how], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(HERE)})
    controllers.append(proc)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"the controller did not mount: {proc.communicate(timeout=30)[1]}"
    info = json.loads(line)
    assert mounted(folder) and alive(info["daemon"])
    return proc, info


@pytest.mark.parametrize(("how", "ends"), [
    ("returns", None), ("raises", None), ("sleeps", signal.SIGINT), ("sleeps", signal.SIGTERM),
    ("sleeps", signal.SIGKILL),
])
def test_the_mount_goes_with_its_controller_however_it_ends(tmp_path, folder, controllers, how, ends):
    proc, info = start(controllers, tmp_path, folder, how)
    if ends is not None:
        proc.send_signal(ends)
    proc.communicate("go\n", timeout=30)
    assert within(lambda: not mounted(folder) and not alive(info["daemon"]), 15)
    assert not Path(info["sockets"]).exists()             # the control socket's private folder
    assert json.loads((tmp_path / "work" / "storage" / "ops.jsonl").read_text().splitlines()[-1])["op"] == "unmount"


def test_the_watchdog_takes_down_the_mount_of_a_runner_killed_with_its_daemon(tmp_path, folder, controllers):
    proc, info = start(controllers, tmp_path, folder, "guarded", run_id="run-dead-daemon")
    os.kill(info["daemon"], signal.SIGKILL)               # the daemon first: a dead mount stays
    assert within(lambda: not alive(info["daemon"]), 10)
    with pytest.raises(OSError) as dead:
        os.stat(folder)
    assert dead.value.errno in (errno.ENOTCONN, errno.ECONNABORTED)  # "Transport endpoint is not connected"
    assert mounted(folder)
    proc.kill()                                           # then the runner: its watchdog reaps the run
    proc.communicate(timeout=30)
    assert within(lambda: not mounted(folder), 20)
    assert within(lambda: not alive(info["watchdog"]), 20)
    assert Registry(tmp_path / "state").records() == []
    assert not Path(info["sockets"]).exists()
    reaped = [json.loads(line) for line in (tmp_path / "work" / "timeline.jsonl").read_text().splitlines()]
    assert any(f"storage mount {folder}: unmounted {folder}" in r["data"]["removed"] for r in reaped
               if r["kind"] == "reaped")
    assert os.listdir(folder) == []


def test_reap_takes_down_a_dead_runs_mount_and_only_that(tmp_path, folder, controllers):
    proc, info = start(controllers, tmp_path, folder, "guarded", run_id="run-all-dead")
    for pid in (info["watchdog"], info["daemon"]):        # the whole session was killed, say
        os.kill(pid, signal.SIGKILL)
    proc.kill()
    proc.communicate(timeout=30)
    assert within(lambda: not alive(info["daemon"]) and not alive(info["watchdog"]), 10)
    assert mounted(folder)
    other = tmp_path / "other"                            # look-alikes: a live storage mount of someone else
    other.mkdir()
    same_source = tmp_path / "same-source"                # and a mount with the dead one's very source
    same_source.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", info["source"], str(same_source)], check=True, timeout=30)
    try:
        with StorageFs(other, workdir=tmp_path / "other-storage") as live:
            out = subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "reap", "--state-dir",
                                  str(tmp_path / "state")], capture_output=True, text=True, timeout=60,
                                 env={**os.environ, "PYTHONPATH": str(HERE)})
            assert out.returncode == 0, out.stderr
            assert "run-all-dead" in out.stdout and f"storage mount {folder}" in out.stdout
            assert not mounted(folder) and not Path(info["sockets"]).exists()
            assert mounted(other) and mounted(same_source)
            (other / "still-served").write_text("yes")
            assert live.daemon_pid is not None and alive(live.daemon_pid)
    finally:
        subprocess.run(["umount", str(same_source)], check=True, timeout=30)


def test_a_run_guard_records_its_mount_and_will_not_close_while_it_is_there(tmp_path, folder):
    require_fuse()
    timeline = Timeline(tmp_path / "timeline.jsonl")
    guard = RunGuard(timeline, tmp_path, "run-guarded", state_dir=tmp_path / "state")
    guard.open()
    fs = StorageFs(folder, workdir=tmp_path / "storage", ledger=guard)
    try:
        fs.mount()
        assert guard.record is not None and [m.mountpoint for m in guard.record.mounts] == [str(folder)]
        on_disk = json.loads((tmp_path / "state" / "local-runs" / "run-guarded.json").read_text())
        assert fs.record is not None and on_disk["mounts"][0]["source"] == fs.record.source
        with pytest.raises(PlatformError, match=f"storage mount {folder}"):
            guard.close()
        fs.unmount()
        assert guard.record is not None and guard.record.mounts == []
        guard.close()
        assert Registry(tmp_path / "state").records() == []
    finally:
        fs.unmount()
        if guard.watchdog is not None:
            guard.watchdog.release()
        timeline.close()


def test_unmount_takes_down_the_mount_of_a_daemon_that_died(tmp_path, folder):
    require_fuse()
    fs = StorageFs(folder, workdir=tmp_path / "storage").mount()
    try:
        assert fs.daemon_pid is not None
        os.kill(fs.daemon_pid, signal.SIGKILL)
        assert within(lambda: not alive(fs.daemon_pid or 0), 10)
        assert mounted(folder)                            # dead, still listed
    finally:
        fs.unmount()
    assert not mounted(folder)
    fs.unmount()                                          # idempotent
