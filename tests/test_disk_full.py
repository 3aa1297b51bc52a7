"""A full disk under the report folder is a first-class failure: exit 4, one line that says where and how
much was left, teardown that stops everything, and a report (issue 36).

Each test mounts a small tmpfs of its own (root) and removes it after. Before: with etcd, exit 2 and the
last 15 lines of etcd.log (Go stack frames) while the cause hid inside it, recorded as a usage error; with
c10d and a job that filled the disk, exit 4 with Python tracebacks, no report.json, an empty
report.json.tmp, teardown crashing and timeline.jsonl cut at 4,096 bytes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from elastic_chaos.events import RunnerEv, of, read_timeline

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (root)")]

FLOOD = textwrap.dedent("""
    import sys, time
    for i in range(1_000_000):
        print(f"step {i}", flush=True)
        sys.stdout.write("x" * 400_000 + "\\n")   # a chatty script: 8 MB of output a second
        sys.stdout.flush()
        time.sleep(0.05)
""")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 48 MB tmpfs of this test's own, unmounted after (only this mount)."""
    where = tmp_path / "disk"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def elastic_chaos(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_a_disk_too_small_for_etcd_says_so_in_one_line_and_exits_4(small_disk: Path, tmp_path: Path) -> None:
    out = elastic_chaos("run", "kill-node", "--report-dir", str(small_disk / "r"), "--quiet", cwd=tmp_path)
    assert out.returncode == 4, out.stderr
    said = out.stderr.strip().splitlines()
    assert any("no space left on device at" in line and "bytes free" in line and "etcd" in line for line in said)
    assert "goroutine" not in out.stderr and "Traceback" not in out.stderr
    verdict = json.loads((small_disk / "r" / "report.json").read_text())["verdict"]
    assert verdict["outcome"] == "toolkit_error" and [c["name"] for c in verdict["checks"]] == ["disk-full"]


def test_a_job_that_fills_the_disk_stops_the_run_which_still_writes_its_report(small_disk: Path,
                                                                               tmp_path: Path) -> None:
    script = tmp_path / "flood.py"
    script.write_text(FLOOD)
    folder = small_disk / "r"
    out = elastic_chaos("run", "kill-node", "--report-dir", str(folder), "--rdzv-backend", "c10d", "--nodes", "1:1",
                        "--quiet", "--progress-regex", r"^step (?P<step>\d+)$", "--steady-steps", "100000",
                        "--", str(script), cwd=tmp_path)
    assert out.returncode == 4, out.stderr
    assert "Traceback" not in out.stderr and "NOT stopped" not in out.stderr, out.stderr
    assert "no space left on device at" in out.stderr
    raw = json.loads((folder / "report.json").read_text())
    assert raw["verdict"]["outcome"] == "toolkit_error"
    assert any(c["name"] == "disk-full" for c in raw["verdict"]["checks"])
    assert not (folder / "report.json.tmp").exists()
    timeline = read_timeline(folder / "timeline.jsonl")
    assert not timeline.errors, timeline.errors              # whole, not cut mid-line
    [full] = of(timeline.events, RunnerEv.DISK_FULL)
    assert full.data.free_bytes is not None and full.data.free_bytes < 4 * 1024 * 1024
    phases = [e.data.phase for e in of(timeline.events, RunnerEv.PHASE)]
    assert phases[-2:] == ["teardown", "finished"]
    # `elastic-chaos report` names the cause
    again = elastic_chaos("report", str(folder), "--no-png", cwd=tmp_path)
    assert "no space left on device" in again.stdout, again.stdout + again.stderr
