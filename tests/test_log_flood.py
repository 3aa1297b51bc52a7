"""A script that floods its log keeps the runner's memory bounded (issue 36): lines are read at most
4 MiB at a time and a line that never ends is handed on in marked parts of 64 KiB.

Before: a script printing 300 MB without a newline drove the runner to 1.04 GB RSS (the log follower
held the unfinished line whole). The runner here is this test's own process (run_hypothesis runs the
ChaosRun in it); its peak resident memory is reset before the run (/proc/self/clear_refs) and read after.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from elastic_chaos.events import ProgressEv
from elastic_chaos.runner.run import ChaosRun

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent / "scripts" / "flooding_trainer.py"
MB = 1024 * 1024


def peak_rss() -> int:
    """This process' peak resident set since the last reset, in bytes (VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/self/status")


def test_a_script_flooding_its_log_leaves_the_runner_bounded_and_the_verdict_standing(
        run_hypothesis: Callable[..., ChaosRun]) -> None:
    Path("/proc/self/clear_refs").write_text("5")   # the peak from here on, not the session's
    before = peak_rss()
    run = run_hypothesis("kill-node", nodes="1:2", last_call_timeout=3, replace_lost_nodes=False, timeout_s=240,
                         script=[str(SCRIPT)], progress_regex=r"^step (?P<step>\d+)$", steady_steps=40,
                         checkpoint_every=100_000)
    grew = peak_rss() - before
    assert grew < 200 * MB, f"the runner grew by {grew / MB:.0f} MB while the script printed 400 MB"
    log = run.report_dir / "nodes" / "node-0.log"
    assert log.stat().st_size > 400 * MB                      # the flood really happened
    steps = [e.data.step for e in run.timeline.select(ProgressEv.STEP)]
    assert 10 in steps and 20 in steps and 21 in steps        # read through both floods, no step lost
