"""SIGTERM to a run stops everything it started (a CI timeout must not leak servers)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from chaos.events import Event, RunnerEv
from chaos.platforms.local.procs import is_running

pytestmark = pytest.mark.slow


def test_sigterm_to_a_run_stops_its_etcd_and_nodes(tmp_path):
    report = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, "-m", "chaos.cli.main", "run", "kill-node", "--quiet",
                             "--report-dir", str(report)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    timeline = report / "timeline.jsonl"
    pids: set[int] = set()
    with proc:  # closes the pipes whatever happens
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and len(pids) < 3:        # etcd and two agents
                if timeline.exists():
                    for line in timeline.read_text().splitlines():
                        ev = Event.from_json(json.loads(line))
                        data = ev.data
                        pid = data.get("agent_pid") or (data.get("pid") if ev.type == RunnerEv.ETCD_STARTED else None)
                        if pid:
                            pids.add(int(pid))
                time.sleep(0.2)
            assert len(pids) == 3, f"the run did not start etcd and two nodes in time: {pids}"

            os.kill(proc.pid, signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:  # a failed test still stops the run (SIGTERM: it stops its servers)
                proc.terminate()
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)

    assert proc.returncode == 130 and "interrupted" in err
    assert [p for p in pids if is_running(p)] == []
    assert (report / "report.json").exists()                     # and the evidence was written
