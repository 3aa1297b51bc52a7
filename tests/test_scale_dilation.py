"""How the bench picks and reports a time dilation (bench/rdzv_scale.py; the clock itself: test_scale_clock.py)."""
from __future__ import annotations

import pytest

from bench import rdzv_scale
from bench.rdzv_scale import UNDILATED_UP_TO, dilation_for
from chaos.scale.expect import estimate
from chaos.scale.figures import Figures, backend_figures


def steady_size(nodes: int, agent_cpu: float) -> dict:
    return {"nodes": nodes, "steady": {"agent_cpu": agent_cpu, "ops_per_s": {}, "bytes_per_s": 0.0,
                                       "store_cpu": 0.0}}


def test_small_sizes_run_in_real_time():
    assert dilation_for(8) == dilation_for(UNDILATED_UP_TO) == 1.0
    assert dilation_for(UNDILATED_UP_TO, steady_size(16, 0.5)) == 1.0


def test_the_dilation_follows_the_size_befores_cpu_per_node_growing_as_n_squared():
    # 256 nodes at 6.8 millicores each = 1.74 cores per perceived second; at 512: x4 = 6.96 cores; two host
    # processes at a quarter core each: 13.9 -> 16 (a power of two)
    assert dilation_for(512, steady_size(256, 0.0068), processes=2) == 16.0
    # twice the CPU per node needs twice the dilation
    assert dilation_for(512, steady_size(256, 0.0136), processes=2) == 32.0
    # more host processes (cores) need less
    assert dilation_for(512, steady_size(256, 0.0068), processes=16) == 2.0


def test_without_a_steady_window_before_the_dilation_grows_as_n_squared():
    assert dilation_for(128) == 16.0  # (128 / 32)^2
    assert dilation_for(1024, {"nodes": 512, "steady": None}) == 1024.0


def test_a_dilated_size_says_so_in_the_table_and_in_what_the_cli_prints():
    size = {"backend": "c10d", "nodes": 512, "dilation": 16.0, "store_share": 0.0625, "load_before": 0.5,
            "episodes": [{"label": "formation", "seconds": 2.5, "limited": False, "elapsed_s": 50.0,
                          "store_throttled_s": 40.0}],
            "steady": None, "broke": None}
    table = "\n".join(rdzv_scale.size_table("c10d", [size]))
    assert "| 512 | x16, store 0.0625 core |" in table
    assert "(store unthrottled)" in rdzv_scale._dilation({**size, "store_share": None})
    figs = Figures("2026-11-26", "vm", 2, "2.13.0", "fast", {}, {"c10d": backend_figures("c10d", [size])})
    again = Figures.from_json(figs.to_json())
    value, how = estimate(again.backends["c10d"], "formation_s", 512)
    assert value == 2.5 and "under time dilation x16" in how


def test_a_store_waiting_for_its_core_is_named_the_limit_and_a_quiet_one_is_not():
    busy = {"nodes": 1024, "episodes": [{"label": "formation", "elapsed_s": 100.0, "store_throttled_s": 90.0}]}
    quiet = {"nodes": 512, "episodes": [{"label": "formation", "elapsed_s": 100.0, "store_throttled_s": 5.0}]}
    said = rdzv_scale._store_bound("c10d", [quiet, busy])
    assert len(said) == 1 and "1024 nodes" in said[0] and "90%" in said[0]


@pytest.mark.parametrize("given", ["0.5", "fast", "0"])
def test_a_dilation_that_cannot_run_is_refused(tmp_path, capsys, given):
    with pytest.raises(SystemExit) as exc:
        rdzv_scale.one_size_main(["--sizes", "8", "--json-dir", str(tmp_path / "out"), "--dilation", given])
    assert exc.value.code == 2 and "--dilation" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_busy_machine_counts_as_saturated_whatever_its_processes_waited(tmp_path):
    from chaos.scale.harness import Harness, ScaleJob
    from chaos.spec import RdzvBackend

    h = Harness(ScaleJob(RdzvBackend.C10D, 4, 3, 4, dilation=4.0), tmp_path)  # not started: samples only
    # (monotonic t, the machine's busy share over the interval ending at t, host CPU s, run delays s)
    h.samples = [(0.0, 0.1, (0.0,), (0.0,)), (0.5, 0.95, (0.1,), (0.0,)), (1.0, 0.3, (0.2,), (0.0,))]
    assert h.saturated_s(0.0, 1.0) == 0.5


def test_a_size_broken_under_dilation_says_its_shorter_timeout():
    section = {"sizes": {"c10d": [{"nodes": 1024, "dilation": 64.0, "broke": "formation: ..."}]}}
    said = rdzv_scale._timeout(section, "c10d")
    assert "14.0625 perceived seconds" in said and "x64" in said and "346 s would apply" in said
    assert rdzv_scale._timeout({"sizes": {"c10d": [{"nodes": 256, "broke": "x"}]}}, "c10d") == ""


def test_the_busiest_episode_of_the_size_before_sets_the_dilation_when_it_costs_more_than_the_steady_state():
    # 128 nodes at dilation 2: steady 3.7 millicores x 128 = 0.47 cores; its busiest join kept 50 % of 2 cores
    # busy, x2 = 2 cores per perceived second: the storm, not the steady state, sizes 256 (x4 = 8; / 0.5 = 16)
    before = {"nodes": 128, "dilation": 2.0, "steady": {"agent_cpu": 0.0037},
              "episodes": [{"label": "formation", "busy": 0.19}, {"label": "join after leave 1", "busy": 0.5}]}
    assert dilation_for(256, before, processes=2, cores=2) == 16.0
    assert dilation_for(256, {**before, "episodes": []}, processes=2, cores=2) == 4.0  # steady alone: too little


def test_a_size_the_machine_cannot_time_fairly_is_not_run_and_the_sweep_says_why(tmp_path):
    # x256 leaves 900/256 = 3.5 perceived seconds per episode: a re-formation needs more, so it is not run
    said: list[str] = []
    kept: list[dict] = []
    out = rdzv_scale.sweep([1024], ("c10d",), tmp_path, said.append, dilation=256.0, on_size=kept.append)
    assert out["c10d"][0]["not_run"] and kept == out["c10d"]
    assert any("stops before 1024 nodes" in line for line in said)
    section = {"sizes": out, "figures": rdzv_scale.figures({"c10d": [size(256)], **{}}, {}).to_json()}
    section["sizes"] = {"c10d": [size(256), out["c10d"][0]]}
    table = "\n".join(rdzv_scale.size_table("c10d", section["sizes"]["c10d"]))
    assert "| 1024 | x256 needed |" in table and "not run: the dilation it needs" in table
    assert any("stopped before 1024 nodes" in f for f in rdzv_scale.findings(section))


def size(n: int) -> dict:
    return {"backend": "c10d", "nodes": n, "dilation": 16.0, "store_share": 0.0625, "load_before": 0.1,
            "episodes": [{"label": "formation", "seconds": 1.4, "limited": False, "elapsed_s": 30.0, "busy": 0.1}],
            "steady": None, "broke": None}
