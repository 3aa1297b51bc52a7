"""`python -m bench --store-model`'s derivation and section (bench/store_model.py, bench/render/store_model.py) on a
sweep and costs written here in the shapes the bench writes (no harness, no store measured); and the
micro-benchmark's state against torch's own pickle."""
from __future__ import annotations

import pytest

from bench import store_model
from bench.rdzv import shipped
from bench.rdzv.records import SizeResult
from bench.rdzv.section import KEY as RDZV
from bench.render.store_model import markdown
from elastic_chaos.scale.figures import Figures

FAST = {"keep_alive_interval": 1, "keep_alive_max_attempt": 4, "last_call_timeout": 1, "join_timeout": 600}
SIZES = (8, 64, 512)


def size(n: int, dilation: float = 1.0) -> dict:
    """A formed size as bench.rdzv.records.SizeResult.to_json() writes it: 1 read and 1 won compare-and-set per
    node per second, 10 % lost, 100 bytes per participant."""
    ops = {"state_get": float(n), "state_set": float(n), "state_set_lost": n / 10}
    moved = n * 100 * (ops["state_get"] + 3 * (ops["state_set"] + ops["state_set_lost"]))
    return {"backend": "c10d", "nodes": n, "dilation": dilation, "load_before": 0.1,
            "episodes": [{"label": "formation", "kind": "formation", "seconds": 1.3, "store_ops": 10 * n}],
            "steady": {"ops_per_s": ops, "bytes_per_s": moved, "store_cpu": n / 4000, "agent_cpu": 0.002}}


def broken(n: int) -> dict:
    return {"backend": "c10d", "nodes": n, "dilation": 64.0, "load_before": 2.0,
            "broke": "formation: did not form",
            "episodes": [{"label": "formation", "kind": "formation", "seconds": None, "store_ops": 1000,
                          "store_cpu_s": 0.05, "stalled": {"participants": 100, "state_bytes": 6900}}]}


def raw_costs() -> dict:
    """What bench/rdzv/storebench.measure returns: 100 bytes per participant, costs proportional to N."""
    sizes = (8, 64, 512, 4096)
    return {"state": {str(n): {"pickle": 75 * n, "b64": 100 * n} for n in sizes},
            "client": {str(n): {"median": 1e-5 * n, "runs": [1e-5 * n]} for n in sizes},
            "store": {str(n): {"get": [1e-6 * n] * 3, "cas_won": [2e-6 * n] * 3, "cas_lost": [2e-6 * n] * 3}
                      for n in sizes},
            "store_quota": {"64": {"512": {"get": 1e-3, "cas_won": 2.048e-3, "cas_lost": 2e-3}}},
            "load_avg": [1.0, 1.5], "cores": 2}


@pytest.fixture
def results() -> dict:
    sizes = [SizeResult.from_json(s) for s in (size(8), size(64, 2.0), size(512, 8.0), broken(1024))]
    figs = Figures("2026-11-27", "testbox", 2, "2.13.0", "fast", FAST, {"c10d": shipped.backend_figures("c10d", sizes)})
    out = {RDZV: {"sizes": {"c10d": [s.to_json() for s in sizes]}, "figures": figs.to_json()},
           store_model.KEY: {"date": "2026-11-27", "command": store_model.COMMAND, "machine": "testbox (2 cores)",
                             "raw": raw_costs()}}
    store_model.derive(out)
    return out


def test_each_formed_size_is_set_against_the_model_with_its_error(results):
    rows = results[store_model.KEY]["derived"]["rows"]
    assert [r["nodes"] for r in rows] == list(SIZES)
    r = rows[1]
    assert r["state_model"] == pytest.approx(6400) and r["state_measured"] == pytest.approx(6400)
    assert r["state_error"] == pytest.approx(0)
    assert r["ops_model"] == 128 and r["ops_measured"] == pytest.approx(134.4)
    assert r["ops_error"] == pytest.approx(128 / 134.4 - 1)
    assert r["lost_share"] == pytest.approx(6.4 / 70.4)
    on_ops = 64 * 64e-6 + 70.4 * 128e-6      # the measured operations at the costs per operation
    assert r["cpu_on_measured_ops"] == pytest.approx(on_ops)
    assert r["cpu_on_measured_ops_error"] == pytest.approx(on_ops / (64 / 4000) - 1)
    # hosted as the harness: clients x2 faster; w = 64e-5 / 2 + 128e-6
    assert r["serial_s"] == pytest.approx(64 * (32e-5 + 128e-6))


def test_the_first_broken_size_gets_the_collapse_and_the_quotas_cost(results):
    b = results[store_model.KEY]["derived"]["broke"]
    assert b["nodes"] == 1024 and b["stall_measured"] == 100
    assert b["store_cpu_per_op_measured"] == pytest.approx(5e-5)
    assert b["quota_cas_s"] == {"512": pytest.approx(2.048e-3)}
    assert b["plain_cas_s"] == {"512": pytest.approx(1.024e-3)}


def test_predictions_cover_both_presets_and_the_sizes_asked(results):
    preds = results[store_model.KEY]["derived"]["predictions"]
    assert {(p["preset"], p["nodes"]) for p in preds} == {(name, n) for name in ("fast", "torch defaults")
                                                          for n in store_model.PREDICT}
    fast = {p["nodes"]: p for p in preds if p["preset"] == "fast"}
    assert fast[1024]["serial_s"] == pytest.approx(1024 * (1024e-5 + 2048e-6))   # real nodes: no speed-up
    assert fast[1024]["breaks"] and fast[1024]["formation_s"] is None


def test_the_settings_table_holds_the_shortest_keep_alive_each_size_allows_or_why_none(results, monkeypatch):
    monkeypatch.setattr(store_model, "PREDICT", (256, 1024))
    store_model.derive(results)
    rows = {r["nodes"]: r for r in results[store_model.KEY]["derived"]["settings"]}
    # 256 writes in turn take 256 x 3.07 ms = 0.79 s, the store 0.09 of its core: torch's 5 s x 3 holds
    assert rows[256]["flags"] == "--keep-alive-interval 5 --keep-alive-max-attempt 3"
    assert rows[256]["dropped_s"] == [5, 15]
    # at 1024 the reads alone (1e-6 s x 1024 a read, 1024 a second) need 1.05 of the core
    assert rows[1024]["none"].startswith("the agents' reads alone (one a second each) need 1.05 of the store's core")
    text = "\n".join(markdown(results, None))  # type: ignore[arg-type]
    assert "### Settings the model allows at N" in text
    assert "| 256 | `--keep-alive-interval 5 --keep-alive-max-attempt 3` | 5-15 | 0.8 | 0.09 |" in text
    assert "| 1024 | none: the agents' reads alone" in text


def test_the_section_renders_rows_predictions_and_findings(results):
    text = "\n".join(markdown(results, None))  # type: ignore[arg-type]
    assert "## The c10d store's load, modelled" in text
    assert "| 64 | x2 | 6.4 | 6.4 | +0% |" in text
    assert "x64: 512 nodes 2048 µs" in text
    assert "The harness' quota makes each compare_set cost 2.0-2.0x" in text
    assert "Real nodes at 1024, preset fast: ruled out" in text


def test_without_the_costs_there_is_no_section():
    assert markdown({}, None) == []  # type: ignore[arg-type]


def test_the_benchmarks_state_is_torchs_pickle_of_n_participants():
    from bench.rdzv import storebench
    pickled, b64 = storebench.state_bytes(100)
    pickled2, _ = storebench.state_bytes(200)
    per_node = (pickled2 - pickled) / 100
    assert 60 <= per_node <= 80          # address, pid, local id, rank and a heartbeat datetime of its own
    assert b64 == 4 * ((pickled + 2) // 3)
