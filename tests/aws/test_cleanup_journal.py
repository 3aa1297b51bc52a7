"""A game day killed mid-experiment leaves its rollbacks in the journal; cleanup finishes them."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from aws_fleet import FIS_ROLE, REGION

from elastic_chaos.cli.main import main
from elastic_chaos.platforms.aws.guard import CleanupJournal

TAGS = ["--tag", "eks:cluster-name=gameday"]


def _crash_mid_experiment(proxy, state, tmp_path):
    """Run a real game day in a child process and SIGKILL it once its experiment is started."""
    cmd = [sys.executable, "-m", "elastic_chaos.cli.main", "gameday", "spot-interruption", *TAGS, "--gameday",
           "--region", REGION, "--endpoint-url", proxy.endpoint, "--fis-role-arn", FIS_ROLE,
           "--state-dir", str(state), "--poll", "30", "--report-dir", str(tmp_path / "report")]
    journal = CleanupJournal(state / "cleanup-journal.jsonl", "reader")
    with open(tmp_path / "child.log", "wb") as log:
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(journal.pending()) < 2 and child.poll() is None:
                time.sleep(0.05)
        finally:
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)   # the crash: no finally, no cleanup
            child.wait(10)
    assert child.returncode == -signal.SIGKILL, (tmp_path / "child.log").read_text()
    return journal


def test_cleanup_replays_the_journal_after_a_crashed_game_day(clients, fleet, proxy, tmp_path, capsys):
    state = tmp_path / "state"
    journal = _crash_mid_experiment(proxy, state, tmp_path)
    pending = journal.pending()
    assert [u.kind for u in pending] == ["stop-fis-experiment", "delete-fis-template"]
    assert len(clients.fis.list_experiment_templates()["experimentTemplates"]) == 1

    assert main(["cleanup", "--dry-run", "--state-dir", str(state)]) == 0
    assert "would undo stop-fis-experiment" in capsys.readouterr().out
    assert len(journal.pending()) == 2

    proxy.clear()
    code = main(["cleanup", "--state-dir", str(state), "--region", REGION, "--endpoint-url", proxy.endpoint])
    out = capsys.readouterr().out
    assert code == 0, out
    assert journal.pending() == []
    assert clients.fis.list_experiment_templates()["experimentTemplates"] == []
    experiment = clients.fis.get_experiment(id=pending[0].target)["experiment"]
    assert experiment["state"]["status"] in ("stopping", "stopped")
    audit = [json.loads(line) for line in (state / "audit.jsonl").read_text().splitlines()]
    undone = [(e["operation"], e["cleanup"]) for e in audit
              if e["phase"] == "result" and e["run"].startswith("cleanup")]
    assert undone == [("StopExperiment", True), ("DeleteExperimentTemplate", True)]
    assert main(["cleanup", "--state-dir", str(state)]) == 0
    assert "nothing to clean up" in capsys.readouterr().out


def test_the_next_game_day_finishes_the_rollbacks_first(clients, fleet, proxy, tmp_path, capsys):
    state = tmp_path / "state"
    journal = _crash_mid_experiment(proxy, state, tmp_path)
    assert len(journal.pending()) == 2
    code = main(["gameday", "terminate-instance", *TAGS, "--dry-run", "--region", REGION,
                 "--endpoint-url", proxy.endpoint, "--state-dir", str(state)])
    assert code == 0
    assert "would finish 2 rollback(s) an earlier run left open" in capsys.readouterr().out
    assert len(journal.pending()) == 2              # a dry run finishes nothing
    code = main(["gameday", "terminate-instance", *TAGS, "--gameday", "--region", REGION, "--poll", "0.2",
                 "--endpoint-url", proxy.endpoint, "--state-dir", str(state), "--replacement-timeout", "20",
                 "--report-dir", str(tmp_path / "report2")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "finishing 2 rollback(s)" in out
    assert journal.pending() == []
    assert clients.fis.list_experiment_templates()["experimentTemplates"] == []
