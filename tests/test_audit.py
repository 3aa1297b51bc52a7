"""Audits across runs: nearest-rank percentiles, pass rate, score and regressions (docs/REPORTS.md).

Hand-made report.json folders carry numbers chosen so every expected value
can be checked by hand; the real recorded runs (tests/fixtures/runs/) check
the same on what the tool actually measured.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from elastic_chaos.errors import SpecError
from elastic_chaos.reporting.audits import audit

RUNS = Path(__file__).parent / "fixtures" / "runs"


def fake_run(folder: Path, *, kind: str = "kill-node", platform: str = "local", passed: bool = True,
             regain: float | None, lost: int | None = 10, detect: float = 1.0) -> Path:
    """A report.json with the given numbers: phases detect, rendezvous = regain/2, rest split."""
    folder.mkdir(parents=True)
    phases = None if regain is None else {"detect": detect, "rendezvous": regain / 2,
                                          "restart": regain / 2 - detect - 1.0, "replay": 1.0}
    report = {"schema_version": 1, "scenario": folder.name, "platform": platform,
              "job": {"nodes": "1:2", "checkpoint_every": 20},
              "verdict": {"passed": passed, "reasons": []},
              "faults": [{"kind": kind, "target": "node-1", "injected_at": 1000.0,
                          "metrics": {"regain_s": regain, "lost_steps": lost,
                                      "phases": phases or {"detect": detect, "rendezvous": None,
                                                           "restart": None, "replay": None}}}],
              "started_at": 990.0, "finished_at": 1100.0}
    (folder / "report.json").write_text(json.dumps(report))
    return folder


def test_nearest_rank_percentiles():
    from elastic_chaos.analysis.stats import percentile
    assert percentile([1, 2, 3, 4], 50) == 2          # rank ceil(2.0) = 2
    assert percentile([4, 1, 3, 2, 5], 50) == 3       # rank ceil(2.5) = 3, after sorting
    assert percentile(list(range(1, 11)), 95) == 10   # rank ceil(9.5) = 10: the largest
    assert percentile(list(range(1, 21)), 95) == 19   # rank ceil(19.0) = 19
    assert percentile([7], 95) == 7
    assert percentile([], 50) is None


@pytest.fixture
def mixed(tmp_path):
    """5 kill-node runs on local (one failed), 2 partition runs on kind (one never regained)."""
    root = tmp_path / "history"
    for i, (regain, passed, lost) in enumerate([(10, True, 0), (20, True, 5), (30, True, 10),
                                                (40, True, 10), (100, False, 20)]):
        fake_run(root / f"kill-{i}", regain=regain, passed=passed, lost=lost, detect=float(i + 1))
    fake_run(root / "part-0", kind="partition-node", platform="kind", regain=50.0, lost=0)
    fake_run(root / "part-1", kind="partition-node", platform="kind", regain=None, lost=None, passed=False)
    return root


def test_a_mixed_set_is_grouped_per_fault_kind_and_platform(mixed):
    runs = [audit.summarize_run(f) for f in audit.find_runs([mixed])]
    groups = {g.key: g for g in audit.aggregate(runs)}
    assert set(groups) == {("kill-node", "local"), ("partition-node", "kind")}
    kill = groups[("kill-node", "local")]
    assert len(kill.runs) == 5 and kill.passed == 4 and kill.pass_rate == 0.8
    regain = kill.stat("regain")
    assert (regain.n, regain.p50, regain.p95, regain.max) == (5, 30, 100, 100)
    lost = kill.stat("lost_steps")
    assert (lost.n, lost.p50, lost.p95, lost.max) == (5, 10, 20, 20)
    detect = kill.stat("detect")
    assert (detect.p50, detect.p95, detect.max) == (3.0, 5.0, 5.0)
    rdzv = kill.stat("rendezvous")                            # regain / 2: 5, 10, 15, 20, 50
    assert (rdzv.p50, rdzv.p95, rdzv.max) == (15, 50, 50)
    # score = 100 x 0.8 x mean(60/70, 60/80, 60/90, 60/100, 60/160)
    expected = 100 * 0.8 * (60 / 70 + 60 / 80 + 60 / 90 + 60 / 100 + 60 / 160) / 5
    assert kill.score() == pytest.approx(expected) and round(expected, 1) == 52.0


def test_a_fault_that_never_regained_scores_zero_and_is_left_out_of_percentiles(mixed):
    runs = [audit.summarize_run(f) for f in audit.find_runs([mixed])]
    part = {g.key: g for g in audit.aggregate(runs)}[("partition-node", "kind")]
    assert part.stat("regain").n == 1 and part.stat("regain").p50 == 50
    assert part.stat("rendezvous").n == 1
    assert part.score() == pytest.approx(100 * 0.5 * (60 / 110 + 0) / 2)


def test_real_recorded_runs_audit_with_the_crashed_one_counted_as_not_passed(tmp_path):
    for name in ("kill-node-replaced", "kill-node-shrink", "kill-node-c10d", "crashed-mid-recovery"):
        shutil.copytree(RUNS / name, tmp_path / "ci" / name)
    runs = [audit.summarize_run(f) for f in audit.find_runs([tmp_path / "ci"])]
    (group,) = audit.aggregate(runs)
    assert group.key == ("kill-node", "local") and len(group.runs) == 4 and group.passed == 3
    regain = group.stat("regain")                             # crashed: never regained, left out
    assert (regain.n, regain.p50, regain.p95, regain.max) == (3, 51.108, 53.553, 53.553)
    # 0.101 (crashed: recomputed, the survivor's collective error counts as detection), 0.789, 0.99, 1.044
    detect = group.stat("detect")
    assert (detect.n, detect.p50, detect.p95) == (4, 0.789, 1.044)
    expected = 100 * 0.75 * (60 / 111.108 + 60 / 93.182 + 60 / 113.553 + 0) / 4
    assert group.score() == pytest.approx(expected, abs=0.05)
    assert group.goodput.n == 4 and all(0 < r.goodput < 1 for r in group.runs if r.goodput)


def test_regressions_against_a_baseline(tmp_path):
    for i, regain in enumerate((20, 22, 24)):
        fake_run(tmp_path / "base" / f"r{i}", regain=regain)
    for i, regain in enumerate((30, 32, 34)):
        fake_run(tmp_path / "now" / f"r{i}", regain=regain, passed=i != 0)
    base = audit.aggregate([audit.summarize_run(f) for f in audit.find_runs([tmp_path / "base"])])
    now = audit.aggregate([audit.summarize_run(f) for f in audit.find_runs([tmp_path / "now"])])
    flagged = {r.what for r in audit.compare(now, base)}
    # regain p50 32 vs 22 (+45%), rendezvous 16 vs 11, restart 14 vs 9; detect/replay/lost unchanged
    assert flagged == {"pass rate", "regain", "rendezvous", "restart", "score"}
    assert audit.compare(base, base) == []


def test_small_slowdowns_within_tolerance_are_not_regressions(tmp_path):
    fake_run(tmp_path / "base" / "r", regain=20)
    fake_run(tmp_path / "now" / "r", regain=23)              # +15% < 20% tolerance
    base = audit.aggregate([audit.summarize_run(tmp_path / "base" / "r")])
    now = audit.aggregate([audit.summarize_run(tmp_path / "now" / "r")])
    assert audit.compare(now, base) == []
    # at 10%: regain 20 -> 23, rendezvous 10 -> 11.5, restart 8 -> 9.5 all grew by more than 10% and 1 s
    assert {r.what for r in audit.compare(now, base, tolerance=0.1)} == {"regain", "rendezvous", "restart"}
    assert {r.what for r in audit.compare(now, base, tolerance=0.1, min_delta_s=2.0)} == {"regain"}


def test_a_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        audit.find_runs([tmp_path / "nope"])


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def test_audit_command_prints_the_table_and_writes_html_and_json(mixed, tmp_path):
    out = cli("audit", str(mixed), "--html", str(tmp_path / "out" / "audit.html"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert re.search(r"kill-node\s+local\s+5\s+5\s+80% \(4/5\)\s+30\.0s\s+10\s+-\s+52\n", out.stdout)
    assert re.search(r"regain\s+5\s+30\.0s\s+100\.0s\s+100\.0s\n", out.stdout)
    html = (tmp_path / "out" / "audit.html").read_text()
    assert 'id="groups"' in html and 'id="audit-phases"' in html and "default-src 'none'" in html
    data = json.loads((tmp_path / "out" / "audit.json").read_text())
    kill = next(g for g in data["groups"] if g["fault"] == "kill-node")
    assert kill["metrics"]["regain"] == {"n": 5, "p50": 30, "p95": 100, "max": 100}
    assert kill["score"] == 52.0


def test_audit_command_exits_1_on_a_regression(tmp_path):
    fake_run(tmp_path / "base" / "r", regain=20)
    fake_run(tmp_path / "now" / "r", regain=40)
    out = cli("audit", "now", "--baseline", "base", "--html", "a.html", cwd=tmp_path)
    assert out.returncode == 1
    assert "REGRESSIONS against the baseline (1 run(s))" in out.stdout
    assert "kill-node on local: regain p50 40s (baseline 20s, +20.0s)" in out.stdout
    assert "regression" in (tmp_path / "a.html").read_text()


def test_audit_of_nothing_is_a_usage_error(tmp_path):
    (tmp_path / "empty").mkdir()
    out = cli("audit", "empty", cwd=tmp_path)
    assert out.returncode == 2 and "no report folder" in out.stderr and "Traceback" not in out.stderr


def test_a_passive_watch_recording_is_its_own_group():
    (run,) = [audit.summarize_run(f) for f in audit.find_runs([RUNS / "watched-kill-node"])]
    (group,) = audit.aggregate([run])
    assert group.key == ("node-lost", "etcd") and group.passed == 1
    assert group.stat("regain").n == 1
