"""A runner killed with SIGKILL while its job's checkpoint volume hangs leaves no mount and no
process: the storage daemon sees its lifeline close, clears the hang and unmounts, or the run's
watchdog takes the recorded mount down first; the watchdog reaps the rest; `elastic-chaos reap`
says what the watchdog did and finds nothing left to do.

Real runs (root and /dev/fuse; skipped with the reason elsewhere, a failure under CI=true).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import orphans
import pytest
from storagefs_helpers import require_fuse
from test_signals import run_cgroups, start_run, stop_run, wait_for_event

pytestmark = pytest.mark.slow


def fuse_mounts_under(folder: Path) -> list[str]:
    """Our storage mounts at or under ``folder`` in /proc/mounts (read without touching the folder)."""
    return [line for line in Path("/proc/mounts").read_text().splitlines()
            if line.split()[2] == "fuse.elastic-chaos" and line.split()[1].startswith(str(folder))]


def save_began_after_the_hang(report: Path) -> bool:
    """Whether the job began a save (the trainer says so before it touches the volume) after the hang."""
    events = [json.loads(line) for line in (report / "timeline.jsonl").read_text().splitlines() if line.strip()]
    hung = next((e["t"] for e in events if e["kind"] == "storage_fault"), None)
    return hung is not None and any(e["source"] == "checkpoint" and e["kind"] == "started" and e["t"] > hung
                                    for e in events)


def within(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def test_a_runner_killed_during_a_storage_hang_leaves_no_mount_and_no_process(tmp_path):
    require_fuse()
    report, state = tmp_path / "r", tmp_path / "state"
    proc = start_run(report, "--duration", "120", state=state, hypothesis="storage-hang")
    try:
        wait_for_event(report, "storage_fault")                  # the hang is on: the next save sleeps in it
        assert within(lambda: save_began_after_the_hang(report), 30), "no save began in the hang"
        time.sleep(1.0)                                          # the save is in the volume, held
        assert fuse_mounts_under(report), "the run's checkpoint folder was not behind the storage layer"
        proc.kill()                                              # SIGKILL: the runner does nothing more
        proc.communicate(timeout=60)
        unmounted = within(lambda: not fuse_mounts_under(report), 60)
        left = orphans.wait_until_gone(report, 60)
        run_id = orphans.run_id_of(report)
    finally:
        stop_run(proc, report)

    assert unmounted, f"left mounted: {fuse_mounts_under(report)}"
    assert left == {}, f"outlived the runner: {left}"
    assert run_id and run_cgroups(run_id) == []
    out = subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "reap", "--state-dir", str(state)],
                         capture_output=True, text=True, timeout=60)
    # the daemon may unmount on its own (its lifeline closed) before the watchdog looks; if not, the
    # watchdog took the mount down, and the reap says so: either way nothing is left for it to do
    assert out.returncode == 0 and f"run {run_id}" in out.stdout, out.stdout
    assert "storage mount" not in out.stdout or "its watchdog" in out.stdout, out.stdout
