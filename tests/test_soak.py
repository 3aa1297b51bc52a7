"""`make soak` (bench/soak.py): per-scenario pass/fail counts, flaky scenarios and metric spreads
from catalog runs, aggregated without running a catalog (the catalog runs are made of recorded
report folders and outcome logs; a real small soak is in bench/RESULTS.md)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bench import soak
from bench.render import Plots
from bench.render import soak as soak_section

RUNS = Path(__file__).parent / "fixtures" / "runs"
BENCH = Path(__file__).resolve().parent.parent / "bench"
KILL = "scenarios/test_kill_node.py::test_a_lost_node_is_replaced"
CRASH = "scenarios/test_worker_crash.py::test_a_crashed_worker_is_restarted"
GPU = "scenarios/test_kill_node.py::test_on_gpus"


def log(path: Path, phases: list[tuple[str, str, str]]) -> Path:
    path.write_text("".join(json.dumps({"nodeid": n, "when": w, "outcome": o}) + "\n" for n, w, o in phases))
    return path


def test_a_test_failed_in_any_phase_is_failed_and_a_skip_is_a_skip(tmp_path):
    outs = soak.outcomes(log(tmp_path / "o.jsonl", [
        (KILL, "setup", "passed"), (KILL, "call", "passed"), (KILL, "teardown", "failed"),   # split brain at teardown
        (CRASH, "setup", "passed"), (CRASH, "call", "passed"), (CRASH, "teardown", "passed"),
        (GPU, "setup", "skipped"), (GPU, "teardown", "passed")]))
    assert outs == {KILL: "failed", CRASH: "passed", GPU: "skipped"}


def test_a_scenario_that_passed_and_failed_in_identical_runs_is_flaky():
    runs = [("local", {KILL: "passed", CRASH: "passed", GPU: "skipped"}, {KILL: {"regain": [8.1], "lost_steps": [9]}}),
            ("local", {KILL: "failed", CRASH: "passed", GPU: "skipped"},
             {KILL: {"regain": [31.0], "lost_steps": [12]}}),
            ("local", {KILL: "passed", CRASH: "failed", GPU: "skipped"}, {KILL: {"regain": [8.4], "lost_steps": [9]}})]
    found = {s.nodeid: s for s in soak.aggregate(runs)}
    assert (found[KILL].passed, found[KILL].failed, found[KILL].flaky) == (2, 1, True)
    assert found[KILL].to_json()["metrics"]["regain"] == {"n": 3, "min": 8.1, "median": 8.4, "max": 31.0,
                                                          "values": [8.1, 31.0, 8.4]}
    assert found[CRASH].flaky and not found[GPU].flaky and found[GPU].skipped == 3
    runs_done = [soak.CatalogRun("local", i, Path("r"), Path("l"), 1, 400.0 + i) for i in range(3)]
    block = soak.summary(list(found.values()), runs_done, keyword=None, date="2026-11-26")
    local = block["catalogs"]["local"]
    assert local["runs"] == 3 and local["failures"] == 2 and sorted(local["flaky"]) == sorted([KILL, CRASH])
    text = "\n".join(soak_section.markdown({"soak": block}, Plots()))
    row = "| local | `test_kill_node.py::test_a_lost_node_is_replaced` | 2 | 1 | 0 | **yes** | 3: 8.1 / 8.4 / 31 | "
    assert "2 flaky scenario(s)" in text and row + "3: 9 / 9 / 12 |" in text


def test_a_scenario_that_always_failed_is_not_flaky_but_counted():
    found = soak.aggregate([("local", {KILL: "failed"}, {}), ("local", {KILL: "failed"}, {})])
    block = soak.summary(found, [], keyword="kill", date="d")
    assert not found[0].flaky and found[0].failed == 2 and block["keyword"] == "kill"


def a_catalog_run(root: Path, index: int, outcome: str) -> soak.CatalogRun:
    """A catalog run made of a recorded run's report folder, its scenario set to KILL."""
    reports = root / f"local-{index}"
    folder = reports / "scenarios_test_kill_node.py_test_a_lost_node_is_replaced"
    shutil.copytree(RUNS / "kill-node-replaced", folder)
    report = json.loads((folder / "report.json").read_text())
    report["scenario"] = KILL
    (folder / "report.json").write_text(json.dumps(report))
    outcomes = log(reports / "outcomes.jsonl", [(KILL, "setup", "passed"), (KILL, "call", outcome)])
    return soak.CatalogRun("local", index, reports, outcomes, 0 if outcome == "passed" else 1, 60.0)


def test_a_soak_of_one_catalog_keeps_the_other_catalogs_figures_with_their_own_date():
    local = soak.aggregate([("local", {KILL: "passed"}, {})])
    before = soak.summary(local, [soak.CatalogRun("local", 0, Path("r"), Path("l"), 0, 500.0)], keyword=None,
                          date="2026-11-25")
    cluster = soak.aggregate([("cluster", {KILL: "failed"}, {}), ("cluster", {KILL: "passed"}, {})])
    now = soak.summary(cluster, [soak.CatalogRun("cluster", i, Path("r"), Path("l"), i, 900.0) for i in range(2)],
                       keyword=None, date="2026-11-26")
    block = soak.merged(before, now)
    assert set(block["catalogs"]) == {"local", "cluster"}
    assert block["catalogs"]["local"]["date"] == "2026-11-25" and block["catalogs"]["cluster"]["date"] == "2026-11-26"
    assert [(s["catalog"], s["flaky"]) for s in block["scenarios"]] == [("cluster", True), ("local", False)]
    again = soak.merged(block, soak.summary(local, [], keyword=None, date="2026-11-27"))   # a local re-soak with no run
    assert set(again["catalogs"]) == {"local", "cluster"}
    text = "\n".join(soak_section.markdown({"soak": block}, Plots()))
    assert "**local** catalog: 1 run(s)" in text and "2026-11-25" in text and "**cluster** catalog: 2 run(s)" in text


def test_the_cluster_catalog_runs_one_job_at_a_time_as_make_cluster_test():
    local = soak.pytest_command("local", Path("r"), Path("l"), keyword=None, workers=2)
    cluster = soak.pytest_command("cluster", Path("r"), Path("l"), keyword=None, workers=2, kubeconfig=Path("k"))
    assert local[local.index("-n") + 1] == "2" and "-n" not in cluster
    assert cluster[cluster.index("--platform") + 1] == "kubernetes"


def test_an_interrupted_soak_lets_the_catalog_run_tear_its_job_down(tmp_path):
    # the catalog run stand-in tears down on SIGINT as pytest does (a scenario's teardown deletes
    # the job: on a cluster nothing else would); the soak used to SIGKILL it and leave the pods
    done = tmp_path / "torn-down"
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import pathlib, time
        try:
            time.sleep(60)
        except KeyboardInterrupt:
            time.sleep(0.5)
            pathlib.Path({str(done)!r}).write_text("yes")
        """)], start_new_session=True)
    time.sleep(1.0)
    soak.stop_catalog(child, wait_s=30)
    assert child.returncode is not None and done.read_text() == "yes"


def test_metrics_are_read_from_the_report_folders_by_scenario(tmp_path):
    run = a_catalog_run(tmp_path, 0, "passed")
    values = soak.metrics(run.reports)
    assert set(values) == {KILL} and len(values[KILL]["regain"]) == 1 and values[KILL]["lost_steps"]


def test_the_soak_writes_its_block_and_section_keeping_every_other_figure(tmp_path, monkeypatch):
    out = tmp_path / "bench"
    out.mkdir()
    shutil.copy(BENCH / "results.json", out / "results.json")
    for plot in ("recovery.png", "rdzv_scale.png"):
        if (BENCH / plot).exists():
            shutil.copy(BENCH / plot, out / plot)
    before = json.loads((out / "results.json").read_text())
    stale = json.loads(json.dumps(before))   # derived by an older toolkit: its settings rows lack today's keys
    for row in stale["store_model"]["derived"].get("settings") or []:
        row.pop("dropped_s", None)
    (out / "results.json").write_text(json.dumps(stale))
    made = iter(["passed", "failed"])

    def fake_catalog(catalog: str, index: int, root: Path, **_: object) -> soak.CatalogRun:
        return a_catalog_run(root, index, next(made))

    monkeypatch.setattr(soak, "run_catalog", fake_catalog)
    monkeypatch.setattr(soak, "cluster_kubeconfig", lambda: None)
    monkeypatch.setattr("elastic_chaos.signals.terminate_cleanly", lambda: False)   # pytest's SIGTERM stays pytest's
    code = soak.main(["--runs", "2", "--cluster-runs", "0", "--reports", str(tmp_path / "reports"),
                      "--out", str(out)])
    assert code == 1                                          # a flaky scenario: exit 1
    after = json.loads((out / "results.json").read_text())
    assert {k: v for k, v in after.items() if k not in ("soak", "findings")} == \
           {k: v for k, v in before.items() if k not in ("soak", "findings")}
    assert after["soak"]["catalogs"]["local"]["flaky"] == [KILL]
    text = (out / "RESULTS.md").read_text()
    assert "## Our own flakiness (make soak)" in text
    for plot in ("recovery.png", "rdzv_scale.png"):      # the plots already there stay shown
        assert f"]({plot})" in text or not (BENCH / plot).exists()


@pytest.mark.parametrize("workers", [0, 2])
def test_the_plugin_logs_each_phase_once_also_under_xdist(pytester, monkeypatch, workers):
    # `make soak` runs pytest in the repository, where bench/ is importable; here, in a temporary folder
    root = str(Path(__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    pytester.makepyfile("""
        import pytest
        def test_ok(): pass
        def test_bad(): assert False
        @pytest.mark.skip(reason="no GPU")
        def test_gpu(): pass
    """)
    log_path = pytester.path / "outcomes.jsonl"
    args = ["-p", "bench.soak_plugin", "--soak-log", str(log_path), "-p", "no:randomly"]
    result = pytester.runpytest_subprocess(*args, *(["-n", str(workers)] if workers else []))
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    outs = soak.outcomes(log_path)
    assert {k.split("::")[-1]: v for k, v in outs.items()} == {"test_ok": "passed", "test_bad": "failed",
                                                               "test_gpu": "skipped"}
    assert len(log_path.read_text().splitlines()) == 8         # setup/call/teardown x2, setup/teardown of the skip


@pytest.mark.parametrize("hears", [True, False])
def test_a_soak_started_with_sigint_ignored_still_stops_its_catalog_run_with_it(tmp_path, hears):
    # a soak run in the background of a shell script inherits SIGINT ignored; its catalog run is started
    # with SIGINT at its default (soak.hears_sigint), else it would ignore the stop (the control case)
    done = tmp_path / "torn-down"
    stand_in = textwrap.dedent(f"""
        import pathlib, time
        try:
            time.sleep(60)
        except KeyboardInterrupt:
            pathlib.Path({str(done)!r}).write_text("yes")
        """)
    soak_like = textwrap.dedent(f"""
        import subprocess, sys, time
        from bench import soak
        child = subprocess.Popen([sys.executable, "-c", {stand_in!r}], start_new_session=True,
                                 preexec_fn=soak.hears_sigint if {hears!r} else None)
        time.sleep(1.5)
        soak.stop_catalog(child, wait_s=5)
        """)
    subprocess.run([sys.executable, "-c", soak_like], cwd=Path(__file__).parent.parent, timeout=60, check=True,
                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert done.exists() is hears


# a catalog run's stand-in (the real run_catalog starts it as it would pytest): it logs one passed test,
# and on SIGINT (the soak stopping it) says it tore its job down
STAND_IN = textwrap.dedent("""
    import json, pathlib, sys, time
    log, seconds = pathlib.Path(sys.argv[1]), float(sys.argv[2])
    (log.parent / "began").write_text(str(time.time()))
    try:
        time.sleep(seconds)
    except KeyboardInterrupt:
        (log.parent / "torn-down").write_text("yes")
        sys.exit(2)
    log.write_text(json.dumps({"nodeid": "scenarios/test_x.py::test_x", "when": "call", "outcome": "passed"}) + "\\n")
    (log.parent / "ended").write_text(str(time.time()))
    """)


def stand_in_catalogs(monkeypatch, tmp_path: Path, seconds: float) -> None:
    monkeypatch.setattr(soak, "cluster_kubeconfig", lambda: tmp_path / "kubeconfig")
    monkeypatch.setattr(soak, "pytest_command", lambda catalog, reports, log, **_: [
        sys.executable, "-c", STAND_IN, str(log), str(seconds)])
    monkeypatch.setattr(soak, "commit", lambda: None)


def test_the_local_and_the_cluster_catalog_run_side_by_side_each_its_runs_in_turn(tmp_path, monkeypatch):
    stand_in_catalogs(monkeypatch, tmp_path, 1.5)
    args = soak.parse(["--runs", "2", "--cluster-runs", "1", "--reports", str(tmp_path / "r")])
    block = soak.soak(args)
    times = {name: (float((tmp_path / "r" / name / "began").read_text()),
                    float((tmp_path / "r" / name / "ended").read_text()))
             for name in ("local-0", "local-1", "cluster-0")}
    assert times["cluster-0"][0] < times["local-0"][1]          # the cluster's run began before the local one ended
    assert times["local-1"][0] >= times["local-0"][1]           # one catalog's runs: one after the other
    assert {n: c["runs"] for n, c in block["catalogs"].items()} == {"local": 2, "cluster": 1}
    assert [(s["catalog"], s["passed"]) for s in block["scenarios"]] == [("cluster", 1), ("local", 2)]
    assert block["side_by_side"]
    assert "(the local and the cluster catalog side by side, as `.ci/run` runs them)" in \
        "\n".join(soak_section.markdown({"soak": block}, Plots()))


def test_an_interrupted_soak_stops_both_catalogs_runs_and_lets_each_tear_its_job_down(tmp_path, monkeypatch):
    import _thread
    import threading
    stand_in_catalogs(monkeypatch, tmp_path, 60)
    args = soak.parse(["--runs", "2", "--cluster-runs", "1", "--reports", str(tmp_path / "r")])
    threading.Timer(2.0, _thread.interrupt_main).start()        # Ctrl-C while both runs are under way
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        soak.soak(args)
    assert time.monotonic() - began < 30
    assert (tmp_path / "r" / "local-0" / "torn-down").exists() and (tmp_path / "r" / "cluster-0" / "torn-down").exists()
    assert not (tmp_path / "r" / "local-1").exists()            # no next run was started
    assert not soak.LIVE


def test_a_catalogs_commit_is_each_runs_at_its_start_and_a_moved_checkout_is_said():
    runs = [soak.CatalogRun("local", i, Path("r"), Path("l"), 0, 60.0, c) for i, c in enumerate(["aaa", "aaa", "bbb"])]
    block = soak.summary([], runs, keyword=None, date="2026-11-28")
    assert block["catalogs"]["local"]["commit"] == "aaa to bbb (the checkout moved during the soak)"
    assert soak.commits(["ccc", "ccc"]) == "ccc" and soak.commits([None]) is None
