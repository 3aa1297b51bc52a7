"""Exit codes and audits that never lie (issue 25): an unreadable run is skipped and listed, a run
that says nothing about its hypothesis is listed apart, and neither moves a pass rate or score.

Each test was written against the code before the fix and failed there: a whole audit aborted
(exit 2) on one report.json holding ``"passed": "yes"``, a folder in report.json's place or a
JSON line nested 100 000 deep was a traceback, and corrupt runs counted as failures.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from elastic_chaos.reporting.audits import audit

RUNS = Path(__file__).parent / "fixtures" / "runs"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", *args], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))


def test_an_etcd_binary_that_is_no_executable_is_refused_before_a_report_folder_is_made(tmp_path):
    out = cli("run", "kill-node", "--etcd-binary", str(tmp_path / "nope"), "--report-dir", str(tmp_path / "r"))
    assert out.returncode == 2 and "not an executable file" in out.stderr and not (tmp_path / "r").exists()


def fake_run(folder: Path, *, passed: bool = True, regain: float = 10.0, checks: list[dict] | None = None) -> Path:
    """A kill-node run's report.json with the given verdict and regain."""
    folder.mkdir(parents=True)
    verdict: dict = {"passed": passed, "reasons": []}
    if checks is not None:
        verdict["checks"] = checks
    report = {"schema_version": 2, "scenario": folder.name, "platform": "local",
              "job": {"nodes": "1:2", "checkpoint_every": 20}, "verdict": verdict,
              "faults": [{"kind": "kill-node", "target": "node-1", "injected_at": 1000.0,
                          "metrics": {"regain_s": regain, "lost_steps": 5}}],
              "started_at": 990.0, "finished_at": 1100.0}
    (folder / "report.json").write_text(json.dumps(report))
    return folder


def two_good_runs(root: Path) -> None:
    fake_run(root / "good-0", regain=10.0)
    fake_run(root / "good-1", regain=20.0)


def kill_node_group(root: Path) -> tuple[audit.Group, list[audit.Skipped], list[audit.RunSummary]]:
    runs, skipped = audit.survey(audit.find_runs([root]))
    groups = {g.key: g for g in audit.aggregate(runs)}
    return groups[("kill-node", "local")], skipped, runs


def corrupt(root: Path, how: str) -> Path:
    folder = root / f"bad-{how}"
    if how == "passed-yes":
        fake_run(folder)
        raw = json.loads((folder / "report.json").read_text())
        raw["verdict"]["passed"] = "yes"
        (folder / "report.json").write_text(json.dumps(raw))
    elif how == "report-is-a-folder":
        (folder / "report.json").mkdir(parents=True)
    elif how == "deep-json":
        folder.mkdir(parents=True)
        (folder / "report.json").write_text("[" * 100_000 + "]" * 100_000)
    elif how == "not-utf8":
        folder.mkdir(parents=True)
        (folder / "report.json").write_bytes(b'{"scenario": "\xff\xfe"}')
    elif how == "garbage":
        folder.mkdir(parents=True)
        (folder / "report.json").write_text("this is not json {")
    elif how == "timeline-is-a-folder":
        (folder / "timeline.jsonl").mkdir(parents=True)
    return folder


HOWS = ["passed-yes", "report-is-a-folder", "deep-json", "not-utf8", "garbage", "timeline-is-a-folder"]


@pytest.mark.parametrize("how", HOWS)
def test_an_unreadable_run_is_skipped_listed_and_kept_out_of_the_pass_rate(tmp_path, how):
    two_good_runs(tmp_path)
    bad = corrupt(tmp_path, how)
    group, skipped, runs = kill_node_group(tmp_path)
    assert [s.folder for s in skipped] == [bad] and str(bad) in skipped[0].reason
    assert len(group.runs) == 2 and group.pass_rate == 1.0 and bad not in [r.folder for r in runs]


@pytest.mark.parametrize("how", ["passed-yes", "report-is-a-folder", "deep-json"])
def test_the_audit_command_audits_the_rest_and_names_the_skipped_run(tmp_path, how):
    # before: one such folder aborted the whole audit (exit 2) or was a traceback
    two_good_runs(tmp_path / "runs")
    bad = corrupt(tmp_path / "runs", how)
    out = cli("audit", str(tmp_path / "runs"), "--html", str(tmp_path / "audit.html"))
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert "100% (2/2)" in out.stdout and "1 folder(s) skipped" in out.stdout and str(bad) in out.stdout
    doc = json.loads((tmp_path / "audit.json").read_text())
    assert [s["folder"] for s in doc["skipped"]] == [str(bad)]


@pytest.mark.parametrize("how", ["report-is-a-folder", "deep-json", "not-utf8", "timeline-is-a-folder"])
def test_report_on_an_unreadable_folder_is_a_clean_answer(tmp_path, how):
    bad = corrupt(tmp_path, how)
    out = cli("report", str(bad), "--no-png")
    assert out.returncode in (1, 2) and "Traceback" not in out.stderr, out.stderr


def test_a_timeline_line_nested_100k_deep_is_named_and_the_rest_is_read(tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(RUNS / "kill-node-replaced", folder)
    with open(folder / "timeline.jsonl", "a") as f:
        f.write("[" * 100_000 + "]" * 100_000 + "\n")
    runs, skipped = audit.survey([folder])
    assert not skipped and runs[0].faults
    out = cli("report", str(folder), "--no-png")
    assert out.returncode in (0, 1) and "Traceback" not in out.stderr, out.stderr


def test_runs_not_steady_or_failed_by_the_toolkit_are_listed_apart_not_counted(tmp_path):
    two_good_runs(tmp_path)
    fake_run(tmp_path / "not-steady", passed=False,
             checks=[{"name": "steady-state", "ok": False, "reason": "the job never reached steady state"}])
    fake_run(tmp_path / "blind", passed=False, regain=300.0,
             checks=[{"name": "recovered", "ok": True, "reason": "ok"},
                     {"name": "watcher", "ok": False, "reason": "rendezvous watcher died"}])
    group, skipped, runs = kill_node_group(tmp_path)
    assert not skipped and len(group.runs) == 2 and group.pass_rate == 1.0 and group.stat("regain").max == 20.0
    apart = {r.folder.name: r.outcome.value for r in runs if not r.judged}
    assert apart == {"not-steady": "not_steady", "blind": "toolkit_error"}
    out = cli("audit", str(tmp_path), "--html", str(tmp_path / "audit.html"))
    assert out.returncode == 0 and "2 run(s) listed apart" in out.stdout and "rendezvous watcher died" in out.stdout


def test_a_run_stopped_by_a_bad_input_mid_run_is_a_usage_error_and_no_run(tmp_path):
    from elastic_chaos.analysis.verdict import Outcome
    from elastic_chaos.errors import SpecError
    from elastic_chaos.runner.run import ChaosRun
    with pytest.raises(SpecError), ChaosRun(tmp_path / "r"):
        raise SpecError("trace bad.csv:2: not UTF-8 text")
    raw = json.loads((tmp_path / "r" / "report.json").read_text())
    assert raw["verdict"]["outcome"] == Outcome.USAGE_ERROR.value and Outcome.USAGE_ERROR.exit_code == 2
    runs, skipped = audit.survey([tmp_path / "r"])
    assert not runs and skipped and "not a run" in skipped[0].reason


def test_a_setup_error_met_by_run_exits_2_and_leaves_no_run_for_audit(tmp_path):
    # before: exit 2, yet report.json said FAILED ("run aborted: SetupError") and audit counted a failure
    fake = tmp_path / "etcd"   # an etcd 3.6: refused when the platform starts, once the report folder exists
    fake.write_text("#!/bin/sh\necho 'etcd Version: 3.6.1'\n")
    fake.chmod(0o755)
    out = cli("run", "kill-node", "--etcd-binary", str(fake), "--report-dir", str(tmp_path / "r"))
    assert out.returncode == 2 and "Traceback" not in out.stderr and "3.6" in out.stderr
    two_good_runs(tmp_path / "more")
    shutil.move(str(tmp_path / "r"), str(tmp_path / "more" / "r"))
    group, skipped, _ = kill_node_group(tmp_path / "more")
    assert group.pass_rate == 1.0 and [s.folder.name for s in skipped] == ["r"]


def test_an_interrupted_run_is_its_own_outcome_and_audit_counts_it_in_no_pass_rate(tmp_path):
    # before: SIGTERM during a fault (a cancelled CI job) wrote outcome "failed" and audit counted a failed hypothesis
    from elastic_chaos.analysis.verdict import Outcome
    from elastic_chaos.runner.run import ChaosRun
    two_good_runs(tmp_path / "more")
    with pytest.raises(KeyboardInterrupt), ChaosRun(tmp_path / "more" / "cancelled", scenario="kill-node") as run:
        run.phase("recovering")
        raise KeyboardInterrupt("signal 15")
    raw = json.loads((tmp_path / "more" / "cancelled" / "report.json").read_text())
    assert raw["verdict"]["outcome"] == Outcome.INTERRUPTED.value and Outcome.INTERRUPTED.exit_code == 130
    assert "interrupted (SIGTERM) during the recovering phase" in raw["verdict"]["reasons"][0]
    runs, _ = audit.survey([tmp_path / "more" / "cancelled"])
    assert [r.outcome for r in runs] == [Outcome.INTERRUPTED] and not runs[0].judged
    group, _, _ = kill_node_group(tmp_path / "more")
    assert group.pass_rate == 1.0 and len(group.runs) == 2
