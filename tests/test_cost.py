"""What an interruption costs (elastic_chaos.analysis.cost) and the audit's CI gates (reporting/audits/gates.py),
on the recorded runs of tests/fixtures/runs/ (copied: the fixtures are read-only)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from elastic_chaos.analysis.cost import HOURS_PER_MONTH, PRICES, CostBasis, FaultCost, Instance
from elastic_chaos.analysis.result import result_of_timeline
from elastic_chaos.cli.main import main
from elastic_chaos.errors import SpecError
from elastic_chaos.events import Event, RunnerEv
from elastic_chaos.events.timeline import read_timeline
from elastic_chaos.reporting.audits import audit
from elastic_chaos.reporting.report import render_table

RUNS = Path(__file__).parent / "fixtures" / "runs"


def priced_events(run: str, basis: CostBasis) -> list[Event]:
    events = read_timeline(RUNS / run / "timeline.jsonl").events
    return [Event.make(RunnerEv.COST_BASIS, events[0].t, None, basis.recorded()), *events]


def test_an_interruption_costs_its_regain_time_on_every_gpu_the_job_held():
    result = result_of_timeline(priced_events("spot-interruption", CostBasis(gpus_per_node=8, gpu_hour_price=2.5,
                                                                             mtbf_hours=48)))
    (fault,) = result.faults
    regain, before = fault.recovery.regain_s, fault.recovery.world_size_before
    cost = fault.measured["cost"]
    assert regain is not None and before is not None
    assert cost.gpus == before * 8
    assert cost.gpu_hours == pytest.approx(regain * before * 8 / 3600, abs=1e-4)
    assert cost.cost_usd == pytest.approx(regain * before * 8 / 3600 * 2.5, abs=0.01)
    assert cost.month_cost_usd == pytest.approx(regain * before * 8 / 3600 * 2.5 * HOURS_PER_MONTH / 48, abs=0.01)
    assert fault.to_json()["cost"]["cost_usd"] == cost.cost_usd


def test_an_instance_type_prices_from_the_dated_table_and_says_so():
    basis = CostBasis(instance_type=Instance.P4D_24XLARGE).recorded()
    table = PRICES[Instance.P4D_24XLARGE]
    assert basis.gpus_per_node == table.gpus
    assert basis.gpu_hour_price == pytest.approx(table.on_demand_usd_per_hour / table.gpus, abs=1e-4)
    assert basis.price_source is not None and "2024" in basis.price_source and "not today's price" in basis.price_source


def test_contradicting_gpu_counts_are_refused():
    with pytest.raises(SpecError, match="contradicts"):
        CostBasis(instance_type=Instance.P4D_24XLARGE, gpus_per_node=4)


def test_without_a_basis_nothing_is_said_and_without_a_price_gpu_hours_only():
    bare = result_of_timeline(read_timeline(RUNS / "spot-interruption" / "timeline.jsonl").events)
    assert "cost" not in bare.faults[0].measured
    assert "cost" not in bare.faults[0].to_json()
    assert "GPU-h" not in render_table(bare)
    gpus_only = result_of_timeline(priced_events("spot-interruption", CostBasis(gpus_per_node=4)))
    cost = gpus_only.faults[0].measured["cost"]
    assert cost.gpu_hours is not None and cost.cost_usd is None and cost.month_cost_usd is None
    assert any("GPU-hours only" in m for m in cost.missing)
    assert "$" not in render_table(gpus_only).split("What each interruption cost")[1].split("verdict")[0]


def test_a_slow_node_costs_nothing_here():
    result = result_of_timeline(priced_events("straggler-half-speed", CostBasis(gpus_per_node=8, gpu_hour_price=1)))
    assert all("cost" not in f.measured for f in result.faults)


def test_a_replayed_trace_gives_the_monthly_rate():
    result = result_of_timeline(priced_events("replay-spot-3", CostBasis(gpus_per_node=8, gpu_hour_price=1)))
    costs = [f.measured["cost"] for f in result.faults if f.measured["cost"].gpu_hours is not None]
    assert costs and all(c.mtbf_hours is not None and c.mtbf_source and "trace" in c.mtbf_source for c in costs)


def test_every_rendering_says_the_same_cost(tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(RUNS / "spot-interruption", folder)
    (folder / "report.json").unlink()
    basis = CostBasis(instance_type=Instance.G5_48XLARGE, mtbf_hours=100).recorded()
    first = json.loads((folder / "timeline.jsonl").read_text().splitlines()[0])
    line = Event.make(RunnerEv.COST_BASIS, first["t"], None, basis).to_json()
    text = (folder / "timeline.jsonl").read_text()
    (folder / "timeline.jsonl").write_text(json.dumps(line) + "\n" + text)
    assert main(["report", str(folder)]) in (0, 1)
    raw = result_of_timeline(read_timeline(folder / "timeline.jsonl").events).to_json()["faults"][0]["cost"]
    value = FaultCost.from_json(raw)
    shown = [f"${value.cost_usd:,.2f}", f"${value.month_cost_usd:,.2f}", f"{value.gpu_hours:g} GPU-h"]
    md, html = (folder / "summary.md").read_text(), (folder / "report.html").read_text()
    for words in shown:
        assert words in md and words in html, words
    assert "an example dated 2024, not today" in md and "an example dated 2024, not today" in html


@pytest.fixture
def history(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for name in ("spot-interruption", "kill-node-shrink"):
        shutil.copytree(RUNS / name, root / name)
    return root


def audit_cli(history: Path, tmp_path: Path, *flags: str) -> int:
    return main(["audit", str(history), "--html", str(tmp_path / "a" / "audit.html"), *flags])


def test_goodput_gate_fails_naming_the_run_below_it(history, tmp_path, capsys):
    runs = {r.folder.name: r.goodput for r in audit.survey(audit.find_runs([history]))[0]}
    low, high = sorted(runs.items(), key=lambda kv: kv[1] or 0)
    assert low[1] is not None and high[1] is not None and low[1] < high[1]
    floor = (low[1] + high[1]) / 2
    assert audit_cli(history, tmp_path, "--goodput-at-least", f"{floor:.4f}") == 1
    out = capsys.readouterr().out
    assert f"gate broken: {history / low[0]}: goodput {low[1]:.4g}" in out
    assert str(history / high[0]) + ":" not in out.split("gate broken")[-1]
    assert audit_cli(history, tmp_path, "--goodput-at-least", f"{low[1] * 0.9:.4f}") == 0
    doc = json.loads((tmp_path / "a" / "audit.json").read_text())
    assert doc["gates"]["breaches"] == []


def test_cost_gate_fails_naming_the_fault_and_its_cost(history, tmp_path, capsys):
    costs = {r.folder.name: r.faults[0].measured["cost"].cost_usd
             for r in audit.survey(audit.find_runs([history]), CostBasis(gpus_per_node=8, gpu_hour_price=3)
                                   .recorded())[0]}
    dear = max(costs, key=lambda k: costs[k])
    ceiling = (max(costs.values()) + min(costs.values())) / 2
    flags = ("--gpus-per-node", "8", "--gpu-hour-price", "3", "--max-cost-per-interruption", f"{ceiling:.2f}")
    assert audit_cli(history, tmp_path, *flags) == 1
    out = capsys.readouterr().out
    assert f"gate broken: {history / dear}: fault 0" in out and f"${costs[dear]:,.2f}" in out
    assert audit_cli(history, tmp_path, *flags[:4], "--max-cost-per-interruption", f"{max(costs.values()):.2f}") == 0


@pytest.mark.parametrize("flags", [("--goodput-at-least", "1.5"), ("--goodput-at-least", "nan"),
                                   ("--max-cost-per-interruption", "5"), ("--max-cost-per-interruption", "-1"),
                                   ("--gpus-per-node", "0")])
def test_bad_gate_values_are_usage_errors(history, tmp_path, capsys, flags):
    with pytest.raises(SystemExit) as e:
        raise SystemExit(audit_cli(history, tmp_path, *flags))
    assert e.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_run_options_sort_the_cost_basis_apart():
    from elastic_chaos.hypotheses.api import settings
    from elastic_chaos.hypotheses.catalog import get
    s = settings(get("kill-node"), {"gpus_per_node": 8, "gpu_hour_price": 2.0, "mtbf_hours": 12}, "local")
    assert s.cost == CostBasis(gpus_per_node=8, gpu_hour_price=2.0, mtbf_hours=12)
    with pytest.raises(SpecError):
        settings(get("kill-node"), {"gpu_hour_price": 0}, "local")


def test_kubernetes_gpus_per_node_is_the_pods_gpus_and_the_cost_s():
    from elastic_chaos.hypotheses.api import settings
    from elastic_chaos.hypotheses.catalog import get
    s = settings(get("kill-node"), {"gpus_per_node": 8, "nproc_per_node": 8}, "kubernetes")
    assert s.platform["gpus_per_node"] == 8 and s.cost.gpus_per_node == 8
    assert not settings(get("kill-node"), {"gpus_per_node": 0}, "kubernetes").cost.given


@pytest.mark.slow
def test_a_real_run_given_its_gpus_and_price_reports_each_interruption_s_cost(run_hypothesis):
    run = run_hypothesis("kill-node", nodes="1:2", checkpoint_every=10, steady_steps=25, last_call_timeout=3,
                         replace_lost_nodes=False, gpus_per_node=8, gpu_hour_price=2.0, mtbf_hours=24)
    assert run.report is not None and run.verdict is not None and run.verdict.passed
    raw = json.loads((run.report.folder / "report.json").read_text())["faults"][0]
    regain, before = raw["metrics"]["regain_s"], raw["metrics"]["world_size_before"]
    assert raw["cost"]["gpus"] == before * 8
    assert raw["cost"]["cost_usd"] == pytest.approx(regain * before * 8 / 3600 * 2.0, abs=0.01)
    shown = render_table(run.report.result)
    assert f"${raw['cost']['cost_usd']:,.2f}" in shown and "24h" in shown
    assert f"${raw['cost']['cost_usd']:,.2f}" in (run.report.folder / "summary.md").read_text()


def test_scale_says_what_one_interruption_s_re_formation_costs_at_n_nodes(capsys):
    import re
    assert main(["scale", "--nodes", "64", "--rdzv-backend", "c10d"]) == 0
    assert "What one interruption costs" not in capsys.readouterr().out
    assert main(["scale", "--nodes", "64", "--rdzv-backend", "c10d", "--gpus-per-node", "4",
                 "--gpu-hour-price", "2"]) == 0
    out = capsys.readouterr().out
    head, _, costs = out.partition("What one interruption costs on the job's 256 GPUs")
    hard = float(re.search(r"re-formation after 1 node lost \(hard\)\s+([\d.]+) s", head).group(1))
    shown = re.search(r"re-formation after 1 node lost \(hard\)\s+([\d,.]+)\s+GPU-hours, \$([\d,.]+)", costs)
    assert shown is not None
    assert float(shown.group(1)) == pytest.approx(hard * 256 / 3600, abs=0.01)
    assert float(shown.group(2).replace(",", "")) == pytest.approx(hard * 256 / 3600 * 2, abs=0.02)
