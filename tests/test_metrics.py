"""Each metric is declared once (elastic_chaos.analysis.metrics, on Recovery's fields and its phases)
and every view derives from that declaration: the terminal table, report.html, summary.md,
the JUnit properties, the audit and a failed scenario's line. report.json reads back into
the typed RunResult, the recorded fixtures (written by older versions) included."""
from __future__ import annotations

import dataclasses
import html as htmllib
import json
import re
import shutil
from pathlib import Path

import pytest

from elastic_chaos.analysis import recovery, registry
from elastic_chaos.analysis.invariants import SplitBrain
from elastic_chaos.analysis.metrics import Measured, MeasuredInt
from elastic_chaos.analysis.observation import ScriptObservation
from elastic_chaos.analysis.recovery import FIELD_METRICS, METRICS, PHASES, Recovery, RecoveryPath
from elastic_chaos.analysis.recovery_analysis import analyze_fault
from elastic_chaos.analysis.result import FaultResult, RunResult, Samples, upgrade_v1
from elastic_chaos.analysis.verdict import Verdict
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.platforms.api import Hit
from elastic_chaos.reporting import render_folder
from elastic_chaos.reporting.audits import audit, audit_view
from elastic_chaos.reporting.load import load_run, read_result
from elastic_chaos.reporting.report import render_table
from elastic_chaos.reporting.views.failure import metric_properties, recovery_line
from elastic_chaos.spec import JobSpec, RendezvousSpec

RUNS = Path(__file__).parent / "fixtures" / "runs"
FINISHED = ["kill-node-replaced", "kill-node-shrink", "kill-node-c10d", "watched-kill-node"]


@pytest.fixture
def folder(tmp_path):
    """A recorded run (kill-node with a replacement), copied: rendering writes into it."""
    return Path(shutil.copytree(RUNS / "kill-node-replaced", tmp_path / "run"))


def declared_columns() -> list[str]:
    """fault, target, then each table metric's column (metrics sharing one count once)."""
    out = ["fault", "target"]
    for m in recovery.METRICS:
        if m.table and not (m.column and out[-1] == m.column):
            out.append(m.column or m.title())
    return out


def terminal_rows(folder: Path) -> list[list[str]]:
    lines = render_table(read_result(folder)).split("\n\n")[0].splitlines()
    return [re.split(r"\s{2,}", line.strip()) for line in lines if not set(line) <= {"-", " "}]


def html_rows(folder: Path) -> list[list[str]]:
    page = (folder / "report.html").read_text()
    table = re.search(r'<table id="recovery">.*?</table>', page, re.S).group(0)
    return [[htmllib.unescape(c) for c in re.findall(r"<t[hd]>(.*?)</t[hd]>", tr)]
            for tr in re.findall(r"<tr>.*?</tr>", table)]


def markdown_rows(folder: Path) -> list[list[str]]:
    lines = [ln for ln in (folder / "summary.md").read_text().splitlines() if ln.startswith("| ")]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines]


def test_the_terminal_html_and_markdown_tables_show_the_declared_columns_in_order(folder):
    render_folder(folder, png=False)
    expected = declared_columns()
    assert expected[2:2 + len(PHASES)] == list(PHASES) and "regain" in expected and "world size" in expected
    terminal, page, md = terminal_rows(folder), html_rows(folder), markdown_rows(folder)
    assert terminal[0] == page[0] == md[0] == expected
    assert terminal[1:] == page[1:] == md[1:]                  # the same words and numbers, cell by cell
    assert len(terminal[1]) == len(expected)


def test_a_world_size_that_changed_again_shows_its_final_size():
    rec = Recovery("kill-node", "node-1", 0.0, world_size_before=2, world_size_after=1, world_size_final=2)
    from elastic_chaos.reporting.views import table
    cells = dict(zip(table.header(), table.row("kill-node", "node-1", rec), strict=True))
    assert cells["world size"] == "2 -> 1 -> 2"
    assert dict(zip(table.header(), table.row("k", "n", dataclasses.replace(rec, world_size_final=1)),
                    strict=True))["world size"] == "2 -> 1"


def test_a_script_jobs_unit_names_the_lost_column_in_every_table():
    rec = Recovery("kill-node", "node-1", 0.0, lost_steps=2)
    result = RunResult("s", "local", None, None,
                       (FaultResult(FaultRecord("kill-node", "node-1", 0.0), {"recovery": rec}),),
                       observation=ScriptObservation(unit="epoch"))
    assert "lost epochs" in render_table(result).splitlines()[0]


def test_one_declaration_decides_where_a_metric_shows(folder, monkeypatch):
    """recovery_s declared for the table, the audit and the failure line but not JUnit:
    it shows in every one of those, and leaves JUnit."""
    changed = tuple(dataclasses.replace(m, table=True, audit=True, failure=True, junit=False)
                    if m.key == "recovery_s" else m for m in METRICS)
    monkeypatch.setattr(recovery, "METRICS", changed)
    registered = registry.fault_groups()
    monkeypatch.setattr(registry, "_FAULT", [dataclasses.replace(g, metrics_=changed) if g.name == "recovery" else g
                                           for g in registered])
    render_folder(folder, png=False)
    result = read_result(folder)
    seconds = f"{result.faults[0].recovery.recovery_s:.1f}s"
    for rows in (terminal_rows(folder), html_rows(folder), markdown_rows(folder)):
        assert rows[0] == declared_columns() and "recovered" in rows[0]
        assert rows[1][rows[0].index("recovered")] == seconds
    assert f"recovered {seconds}" in recovery_line(result.faults[0].recovery)
    props = dict(metric_properties(result, None))
    assert "chaos.fault0.recovery_s" not in props and "chaos.fault0.regain_s" in props
    (group,) = audit.aggregate([audit.summarize_run(folder)])
    assert group.to_json()["metrics"]["recovery"]["p50"] == result.faults[0].recovery.recovery_s
    assert "recovered" in [row[0] for row in audit_view.metric_rows(group)]


def test_junit_properties_are_the_declared_junit_metrics_that_were_observed():
    result = read_result(RUNS / "kill-node-replaced")
    rec = result.faults[0].recovery
    props = dict(metric_properties(result, None))
    metric_props = {k for k in props if k.startswith("chaos.fault0.")} - {"chaos.fault0.kind", "chaos.fault0.target"}
    assert metric_props == {f"chaos.fault0.{m.junit_key}" for m in METRICS if m.junit and m.of(rec) is not None}
    assert {"chaos.fault0.phase.detect_s", "chaos.fault0.regain_s", "chaos.fault0.restarts_used"} <= metric_props


def test_the_audit_aggregates_the_declared_audit_metrics_by_short_name():
    names = [m.name for m in METRICS if m.audit]
    assert names == [*PHASES, "regain", "lost_steps"]
    assert len(set(names)) == len(names)                        # the audit's JSON keys
    (group,) = audit.aggregate([audit.summarize_run(RUNS / "kill-node-shrink")])
    assert list(group.to_json()["metrics"]) == names
    assert [row[0] for row in audit_view.metric_rows(group)[1:]] == [m.title() for m in METRICS if m.audit]
    assert audit_view.summary_rows([group], 60.0)[0][5:7] == ["regain p50", "lost steps p50"]


def test_the_failure_line_shows_the_phases_then_the_other_failure_metrics():
    rec = read_result(RUNS / "kill-node-shrink").faults[0].recovery
    assert recovery_line(rec) == ("kill-node on node-1: detect 1.0s, rendezvous 41.6s, restart 10.0s, "
                                  "retrain 1.0s; regain 53.6s, lost steps 10")


def test_every_field_metric_of_an_analyzed_fault_remembers_its_recovery():
    run = load_run(RUNS / "kill-node-shrink")
    f = run.faults[0]
    rec = analyze_fault(run.events, fault=f.fault, target=f.target, injected_at=f.injected_at)
    for m in FIELD_METRICS:
        value = m.of(rec)
        if value is not None:
            assert isinstance(value, (Measured, MeasuredInt)) and value.recovery is rec and value.metric == m.key


def full_result() -> RunResult:
    rec = Recovery("kill-node", "node-1", 1000.25, pre_step=50, detect_s=1.0, rendezvous_s=12.5, recovery_s=20.0,
                   regain_s=21.0, lost_steps=10, resumed_from_step=40, world_size_before=2, world_size_after=2,
                   world_size_final=2, replacement_s=13.3, restarts_used=1, restart_budget=3, overtaken=False,
                   path=RecoveryPath.RESTART,
                   phases={"detect": 1.0, "exit": 0.5, "shutdown": None, "rendezvous": 11.0, "restart": 7.5,
                           "retrain": 1.0, "stall": None},
                   not_applicable={"shutdown": "every worker stopped within the agent's shutdown wait",
                                   "stall": "the workers were restarted"},
                   missing=["no checkpoint-loaded event: resume step inferred from the first step"],
                   notes=["step 51 on node-0 (rank 0) came after its worker's collective had failed"])
    record = FaultRecord("kill-node", "node-1", 1000.25, Hit("node-1", 1000.25, "sigkill-all", (11, 12),
                                                            {"how": "cgroup.kill"}), trigger="at step 50")
    verdict = Verdict()
    verdict.require(True, "training resumed", check="recovered")
    verdict.skip("no sample ranges", check="exactly-once")
    verdict.fail("lost too much", check="bounded-loss")
    return RunResult(
        scenario="kill-node", platform="local",
        job=JobSpec(nodes="1:2", rdzv=RendezvousSpec(last_call_timeout=3), env=(("A", "1"),), script=("t.py",)),
        verdict=verdict, faults=(FaultResult(record, {"recovery": rec}),), goodput=0.8123,
        split_brains=(SplitBrain(1001.0, 1005.0, (("node-1", 11, 2), ("node-2", 21, 1))),),
        samples=Samples(True, True, 120, 10, 0, 0, "every sample exactly once"),
        observation=ScriptObservation(unit="epoch", notes=("resume inferred",)), started_at=990.5,
        finished_at=1100.75,
        node_logs={"node-1": "nodes/node-1.log"})


def test_a_run_result_round_trips_through_report_json():
    result = full_result()
    raw = json.loads(json.dumps(result.to_json()))
    back = RunResult.from_json(raw)
    assert back.to_json() == raw
    assert back.job == result.job and back.split_brains == result.split_brains and back.samples == result.samples
    assert back.verdict == result.verdict and not back.passed
    assert back.faults[0].record == result.faults[0].record
    assert dataclasses.asdict(back.faults[0].recovery) == dataclasses.asdict(result.faults[0].recovery)


def test_a_run_that_reached_no_verdict_reads_back_without_one():
    raw = json.loads(json.dumps(dataclasses.replace(full_result(), verdict=None).to_json()))
    assert raw["verdict"]["passed"] is False and RunResult.from_json(raw).verdict is None


@pytest.mark.parametrize("name", FINISHED)
def test_recorded_report_json_reads_into_the_typed_result_and_keeps_every_key(name):
    raw = json.loads((RUNS / name / "report.json").read_text())
    result = read_result(RUNS / name)
    assert result is not None and len(result.faults) == len(raw["faults"]) == 1
    assert result.passed is raw["verdict"]["passed"] and result.verdict.reasons == raw["verdict"]["reasons"]
    assert result.faults[0].recovery.regain_s == raw["faults"][0]["metrics"]["regain_s"]
    assert raw["schema_version"] == 1 and result.to_json()["schema_version"] == 2
    assert_contains(result.to_json(), upgrade_v1(raw))          # written again: additive only, but the rename


def test_a_crashed_folder_still_loads_with_a_typed_result():
    run = load_run(RUNS / "crashed-mid-recovery")
    assert not run.complete and run.result is not None
    assert run.result.verdict is None and len(run.result.faults) == len(run.faults)


def assert_contains(new: object, old: object, path: str = "report") -> None:
    """Every key of ``old`` is in ``new`` with the same value and shape."""
    if isinstance(old, dict):
        assert isinstance(new, dict), path
        for key, value in old.items():
            assert key in new, f"{path}.{key} is gone"
            assert_contains(new[key], value, f"{path}.{key}")
    elif isinstance(old, list):
        assert isinstance(new, list) and len(new) == len(old), path
        for i, (a, b) in enumerate(zip(new, old, strict=True)):
            assert_contains(a, b, f"{path}[{i}]")
    else:
        assert new == old, f"{path}: {new!r} != {old!r}"
