"""metrics.prom: every report folder gets one, prometheus_client's parser reads it, its families
derive from the declared metrics, and a real Pushgateway takes the same metrics."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from elastic_chaos.analysis import hang, recovery, throughput
from elastic_chaos.analysis import registry as groups
from elastic_chaos.cli.main import main as cli
from elastic_chaos.reporting import render_folder
from elastic_chaos.reporting.load import load_run
from elastic_chaos.reporting.views.prometheus import FILE, family_name, push, registry

RUNS = Path(__file__).parent / "fixtures" / "runs"
ALL = sorted(p.name for p in RUNS.iterdir() if p.is_dir())


def families(folder: Path) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = (folder / FILE).read_text()
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


@pytest.fixture
def copy_run(tmp_path):
    def copy(name: str) -> Path:
        return Path(shutil.copytree(RUNS / name, tmp_path / name))
    return copy


@pytest.mark.parametrize("name", ALL)
def test_every_recorded_folder_gets_a_metrics_file_the_parser_reads(copy_run, name):
    folder = copy_run(name)
    render_folder(folder, png=False)
    fams = families(folder)
    assert fams["elastic_chaos_run_info"][0][0]["run"] == name


def test_a_crashed_run_says_it_is_incomplete_and_has_no_verdict(copy_run):
    fams = families(_rendered(copy_run("crashed-mid-recovery")))
    assert fams["elastic_chaos_run_complete"][0][1] == 0.0
    assert fams["elastic_chaos_run_passed"] == [], "no verdict: no sample, never a 0 that reads as failed"


def test_a_failed_run_says_so_and_names_its_failed_check(copy_run):
    folder = copy_run("kill-node-shrink")
    report = json.loads((folder / "report.json").read_text())
    report["verdict"] = {"passed": False, "reasons": ["FAILED: lost 30 > 20"],
                         "checks": [{"name": "bounded-loss", "ok": False, "reason": "lost 30 > 20"}]}
    (folder / "report.json").write_text(json.dumps(report))
    fams = families(_rendered(folder))
    assert fams["elastic_chaos_run_passed"][0][1] == 0.0
    assert ({"check": "bounded-loss"}.items() <= fams["elastic_chaos_check_passed"][0][0].items()
            and fams["elastic_chaos_check_passed"][0][1] == 0.0)


def test_every_declared_metric_has_its_family():
    reg = registry(load_run(RUNS / "hung-rank-20s"))
    names = {m.name for m in reg.collect()}
    wanted = {family_name("fault", m) for m in recovery.METRICS if not m.phase} \
        | {family_name("hang", m) for m in hang.METRICS} | {"elastic_chaos_fault_phase_seconds"}
    assert wanted <= names
    straggler = {m.name for m in registry(load_run(RUNS / "straggler-half-speed")).collect()}
    assert {family_name("straggler", m) for m in throughput.METRICS} <= straggler


def test_a_new_declared_metric_shows_up_with_nothing_else_written(monkeypatch):
    extra = dataclasses.replace(recovery.METRICS[-1], key="brand_new_s", label="brand new",
                                unit=recovery.Unit.SECONDS, phase=False)
    monkeypatch.setattr(groups, "_FAULT", [dataclasses.replace(g, metrics_=(*g.metrics, extra))
                                           if g.name == "recovery" else g for g in groups.fault_groups()])
    monkeypatch.setattr(recovery.Recovery, "brand_new_s", 1.5, raising=False)
    names = {m.name: m for m in registry(load_run(RUNS / "hung-rank-20s")).collect()}
    assert names["elastic_chaos_fault_brand_new_seconds"].samples[0].value == 1.5


def test_the_straggler_and_replay_blocks_are_exported(copy_run):
    fams = families(_rendered(copy_run("straggler-half-speed")))
    assert 0.4 <= fams["elastic_chaos_straggler_drop_ratio"][0][1] <= 0.6
    fams = families(_rendered(copy_run("replay-spot-3")))
    assert [v for _, v in fams["elastic_chaos_replay_injected"]] == [3.0]
    assert [v for _, v in fams["elastic_chaos_replay_skipped"]] == [0.0]
    assert "elastic_chaos_replay_goodput_ratio" in fams


def test_a_not_observed_metric_has_no_sample(copy_run):
    fams = families(_rendered(copy_run("straggler-half-speed")))
    assert fams["elastic_chaos_fault_regain_seconds"] == []


def _rendered(folder: Path) -> Path:
    render_folder(folder, png=False)
    return folder


@pytest.fixture
def pushgateway(tmp_path):
    """A real Prometheus Pushgateway (Debian's prometheus-pushgateway) on a free loopback port,
    stopped by PID."""
    unpacked = Path(__file__).resolve().parent.parent / ".pushgateway-testenv/usr/bin/prometheus-pushgateway"
    binary = str(unpacked) if unpacked.exists() else shutil.which("prometheus-pushgateway")
    if binary is None:
        why = "no Pushgateway binary: apt-get install prometheus-pushgateway (make pushgateway-testenv)"
        if os.environ.get("CI") == "true":   # CI installs it: a skip there would hide the push path
            pytest.fail(why)
        pytest.skip(why)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([binary, f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "/-/ready", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_real_pushgateway_serves_the_pushed_run(pushgateway):
    run = load_run(RUNS / "hung-rank-20s")
    push(run, pushgateway)
    text = urllib.request.urlopen(pushgateway + "/metrics", timeout=5).read().decode()
    samples = {f.name: f.samples for f in text_string_to_metric_families(text)}
    timed_out = samples["elastic_chaos_hang_timed_out_seconds"][0]
    assert timed_out.labels["job"] == "elastic-chaos" and timed_out.labels["run"] == "hung-rank-20s"
    assert abs(timed_out.value - 20.0) < 1.0


def test_report_pushes_with_pushgateway_and_exits_2_when_it_cannot(copy_run, pushgateway, capsys):
    folder = copy_run("kill-node-shrink")
    assert cli(["report", str(folder), "--no-png", "--pushgateway", pushgateway]) in (0, 1)
    assert "metrics pushed" in capsys.readouterr().out
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    # a gateway that is not up is refused before anything is rendered
    assert cli(["report", str(folder), "--no-png", "--pushgateway", f"http://127.0.0.1:{closed}"]) == 2
    assert "cannot reach it" in capsys.readouterr().err
    # one that accepts the connection and then fails the push is said after it
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        hangs_up = threading.Thread(target=_hang_up, args=(server, 2), daemon=True)
        hangs_up.start()
        assert cli(["report", str(folder), "--no-png", "--pushgateway",
                    f"http://127.0.0.1:{server.getsockname()[1]}"]) == 2
        hangs_up.join(10)
    assert "not pushed" in capsys.readouterr().err


def _hang_up(server: socket.socket, connections: int) -> None:
    """Accept ``connections`` connections and close each at once (the check, then the push)."""
    server.settimeout(10)
    for _ in range(connections):
        try:
            conn, _ = server.accept()
        except OSError:
            return
        conn.close()


def test_docs_reports_names_every_family_a_run_can_write():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "REPORTS.md").read_text()
    for name in ("hung-rank-20s", "straggler-half-speed", "replay-spot-3", "kill-node-shrink"):
        families = {f.name for f in text_string_to_metric_families(
            generate_latest(registry(load_run(RUNS / name))).decode())}
        missing = sorted(f for f in families if f"`{f}`" not in doc)
        assert not missing, f"docs/REPORTS.md does not document {missing}"
