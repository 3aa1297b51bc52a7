"""How the sweep picks and reports a time dilation (bench/rdzv/plan.py, sweep.py, findings.py and the
RESULTS.md section; the clock itself: test_rdzv_lab_clock.py)."""
from __future__ import annotations

import pytest

from bench.rdzv import measure, plan, shipped, sizes, sweep
from bench.rdzv.findings import _store_bound, _timeout, findings
from bench.rdzv.plan import UNDILATED_UP_TO, dilation_for
from bench.rdzv.records import SizeResult
from bench.rdzv.section import RdzvSection
from bench.render.rdzv import _dilation, markdown, size_table
from bench.results_file import write_json
from elastic_chaos.scale.expect import estimate
from elastic_chaos.scale.figures import Figures

S = SizeResult.from_json


def steady_size(nodes: int, agent_cpu: float) -> SizeResult:
    return S({"nodes": nodes, "steady": {"agent_cpu": agent_cpu, "ops_per_s": {}, "bytes_per_s": 0.0,
                                         "store_cpu": 0.0}})


def section_of(sized: dict[str, list[SizeResult]], **more) -> RdzvSection:
    """A section holding these sizes and their figures, as bench/results_file.py leaves it."""
    raw = {"sizes": {b: [s.to_json() for s in v] for b, v in sized.items()}, **more}
    figs = shipped.figures({b: v for b, v in sized.items()}, RdzvSection.from_json({}))
    return RdzvSection.from_json(raw).updated(figures=figs)


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
    assert dilation_for(1024, S({"nodes": 512, "steady": None})) == 1024.0


def test_a_dilated_size_says_so_in_the_table_and_in_what_the_cli_prints():
    size = S({"backend": "c10d", "nodes": 512, "dilation": 16.0, "store_share": 0.0625, "load_before": 0.5,
              "episodes": [{"label": "formation", "seconds": 2.5, "limited": False, "elapsed_s": 50.0,
                            "store_throttled_s": 40.0}],
              "steady": None, "broke": None})
    table = "\n".join(size_table("c10d", [size]))
    assert "| 512 | x16, store 0.0625 core |" in table
    assert "(store unthrottled)" in _dilation(size.updated(store_share=None))
    figs = Figures("2026-11-26", "vm", 2, "2.13.0", "fast", {}, {"c10d": shipped.backend_figures("c10d", [size])})
    again = Figures.from_json(figs.to_json())
    value, how = estimate(again.backends["c10d"], "formation_s", 512)
    assert value == 2.5 and "under time dilation x16" in how


def test_a_store_waiting_for_its_core_is_named_the_limit_and_a_quiet_one_is_not():
    busy = S({"nodes": 1024, "episodes": [{"label": "formation", "elapsed_s": 100.0, "store_throttled_s": 90.0}]})
    quiet = S({"nodes": 512, "episodes": [{"label": "formation", "elapsed_s": 100.0, "store_throttled_s": 5.0}]})
    said = _store_bound("c10d", [quiet, busy])
    assert len(said) == 1 and "1024 nodes" in said[0] and "90%" in said[0]


@pytest.mark.parametrize("given", ["0.5", "fast", "0"])
def test_a_dilation_that_cannot_run_is_refused(tmp_path, capsys, given):
    with pytest.raises(SystemExit) as exc:
        sizes.main(["--sizes", "8", "--json-dir", str(tmp_path / "out"), "--dilation", given])
    assert exc.value.code == 2 and "--dilation" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_busy_machine_counts_as_saturated_whatever_its_processes_waited(tmp_path):
    from bench.rdzv.harness import Harness, ScaleJob
    from elastic_chaos.spec import RdzvBackend

    h = Harness(ScaleJob(RdzvBackend.C10D, 4, 3, 4, dilation=4.0), tmp_path)  # not started: samples only
    # (monotonic t, the machine's busy share over the interval ending at t, host CPU s, run delays s)
    h.samples = [(0.0, 0.1, (0.0,), (0.0,)), (0.5, 0.95, (0.1,), (0.0,)), (1.0, 0.3, (0.2,), (0.0,))]
    assert h.saturated_s(0.0, 1.0) == 0.5


def test_a_size_broken_under_dilation_says_its_shorter_timeout():
    said = _timeout([S({"nodes": 1024, "dilation": 64.0, "broke": "formation: ..."})])
    assert "14.0625 perceived seconds" in said and "x64" in said and "346 s would apply" in said
    assert _timeout([S({"nodes": 256, "broke": "x"})]) == ""


def test_the_busiest_episode_of_the_size_before_sets_the_dilation_when_it_costs_more_than_the_steady_state():
    # 128 nodes at dilation 2: steady 3.7 millicores x 128 = 0.47 cores; its busiest join kept 50 % of 2 cores
    # busy, x2 = 2 cores per perceived second: the storm, not the steady state, sizes 256 (x4 = 8; / 0.5 = 16)
    before = S({"nodes": 128, "dilation": 2.0, "steady": {"agent_cpu": 0.0037},
                "episodes": [{"label": "formation", "busy": 0.19}, {"label": "join after leave 1", "busy": 0.5}]})
    assert dilation_for(256, before, processes=2, cores=2) == 16.0
    assert dilation_for(256, before.updated(episodes=()), processes=2, cores=2) == 4.0  # steady alone: too little


def test_a_size_the_machine_cannot_time_fairly_is_not_run_and_the_sweep_says_why(tmp_path):
    # x256 leaves 900/256 = 3.5 perceived seconds per episode: a re-formation needs more, so it is not run
    said: list[str] = []
    kept: list[SizeResult] = []
    out = sweep.sweep([1024], ("c10d",), tmp_path, said.append, dilation=256.0, on_size=kept.append)
    assert out["c10d"][0].not_run and kept == out["c10d"]
    assert any("stops before 1024 nodes" in line for line in said)
    section = section_of({"c10d": [size(256), out["c10d"][0]]})
    table = "\n".join(size_table("c10d", section.sizes["c10d"]))
    assert "| 1024 | x256 needed |" in table and "not run: the dilation it needs" in table
    assert section.figures is not None
    assert any("stopped before 1024 nodes" in f for f in findings(section, section.figures))


def size(n: int) -> SizeResult:
    return S({"backend": "c10d", "nodes": n, "dilation": 16.0, "store_share": 0.0625, "load_before": 0.1,
              "episodes": [{"label": "formation", "seconds": 1.4, "limited": False, "elapsed_s": 30.0, "busy": 0.1}],
              "steady": None, "broke": None})


def test_past_the_reduced_set_a_size_runs_its_formation_alone_sized_on_the_formation_before():
    # 128 nodes at x8: its hard-loss storm kept 60 % of 2 cores busy (9.6 cores perceived), its formation 4 %
    before = S({"nodes": 128, "dilation": 8.0, "steady": {"agent_cpu": 0.004},
                "episodes": [{"label": "formation", "busy": 0.04}, {"label": "hard 10%", "busy": 0.6}]})
    step = plan.plan(256, before)
    # the storm asks x128 at 256 (900/128 = 7 perceived s per episode: no losses judged); the formation
    # (0.64 cores x 4 = 2.6, steady 0.51 x 4 = 2.0) asks x8, and gets FORMATION_REAL_S
    assert step == plan.Plan(8.0, plan.FORMATION)
    assert step.episode_real_s == plan.FORMATION_REAL_S
    assert plan.SCOPES[step.scope][:2] == ((), ())
    # while an episode keeps 30 perceived seconds, the reduced set runs; up to x8, every episode
    assert plan.plan(256, before.updated(episodes=before.episodes[:1])).scope == plan.FULL
    assert plan.plan(256, before, fixed=16.0).scope == plan.REDUCED
    assert plan.plan(1024, before, fixed=32.0) == plan.Plan(32.0, plan.FORMATION)
    # after a formation-only size, formation only: its formation is no measure of a loss's storm
    formed_only = S({"nodes": 256, "dilation": 8.0, "scope": plan.FORMATION, "steady": {"agent_cpu": 0.004},
                     "episodes": [{"label": "formation", "busy": 0.05}]})
    assert plan.timeout_s(512, plan.dilation_for(512, formed_only)) >= 30  # it would fit
    assert plan.plan(512, formed_only).scope == plan.FORMATION


def test_a_formation_this_machine_cannot_give_thirty_perceived_seconds_is_not_run():
    step = plan.plan(4096, None, fixed=128.0)  # 2400 / 128 = 18.75 s
    assert step.not_run and "18.8 perceived seconds within 40 real minutes" in step.not_run


def test_a_resumed_sweep_keeps_what_ran_and_tries_a_not_run_size_again(tmp_path):
    earlier = {"c10d": [size(128), S({"backend": "c10d", "nodes": 256, "dilation": 32.0, "not_run": "not run: x"})],
               "etcd-v2": [size(32), size(64).updated(broke="hard 1: ...")]}
    kept = sweep.resumable(earlier, [128, 256, 512])
    assert [s.nodes for s in kept["c10d"]] == [128]
    assert kept["etcd-v2"] == []  # 32 and 64 are not among the sizes asked for
    assert [s.nodes for s in sweep.resumable(earlier, [32, 64, 128])["etcd-v2"]] == [32, 64]  # up to the break
    said: list[str] = []
    # c10d goes on from 128 (x16 kept) at 256: a fixed x256 leaves no time, so it is planned and not run; etcd-v2
    # is kept as it broke, and not measured again
    out = sweep.sweep([32, 64, 128, 256], ("c10d", "etcd-v2"), tmp_path, said.append, dilation=256.0,
                      kept=sweep.resumable(earlier, [32, 64, 128, 256]))
    assert [s.nodes for s in out["c10d"]] == [128, 256] and out["c10d"][1].not_run
    assert [s.nodes for s in out["etcd-v2"]] == [32, 64]
    assert any("kept from the earlier sweep, which broke at 64 nodes" in line for line in said)


def test_resume_needs_a_sweep_to_continue(tmp_path, capsys):
    from bench.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["--rdzv-resume", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "with --scale-rdzv" in capsys.readouterr().err
    (tmp_path / "results.json").write_text('{"recovery": {}}')
    with pytest.raises(SystemExit) as exc:
        main(["--scale-rdzv", "--rdzv-resume", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "holds no rendezvous-at-scale sweep" in capsys.readouterr().err


def test_a_size_that_ran_part_of_the_episodes_says_which_and_a_resumed_section_says_so():
    part = size(1024).updated(scope=plan.FORMATION, episode_real_s=plan.FORMATION_REAL_S)
    table = "\n".join(size_table("c10d", [size(512), part]))
    assert "| ok (formation and steady only) |" in table
    assert table.count("| ok |") == 1  # a size from before sizes carried their scope: every episode
    section = section_of({"c10d": [size(512), part]}, date="2026-11-27", wall_s=1,
                         command="python -m bench --scale-rdzv --rdzv-resume",
                         resumed="this sweep continued the one of 2026-11-26")
    assert "**Resumed**: this sweep continued the one of 2026-11-26." in markdown(section, [], None)


def test_a_formation_that_broke_in_its_long_budget_says_that_timeout():
    broke = S({"nodes": 1024, "dilation": 64.0, "broke": "formation: ...", "episode_real_s": 2400.0})
    said = _timeout([broke])
    assert "37.5 perceived seconds, at most 40 real minutes at dilation x64" in said


def test_a_resumed_sweep_of_one_backend_keeps_the_others_sizes_and_says_whose_they_are(tmp_path, monkeypatch):
    import argparse
    import json

    etcd = size(32).updated(backend="etcd-v2")
    not_run = {"backend": "c10d", "nodes": 256, "not_run": "x"}
    results = {"rdzv_scale": {"date": "2026-11-26", "command": "python -m bench --scale-rdzv",
                              "sizes": {"c10d": [size(128).to_json(), not_run], "etcd-v2": [etcd.to_json()]}}}
    seen: dict = {}

    def fake_sweep(sizes, backends, runs, say, *, on_size, kept, **_):  # the harness itself: test_rdzv_lab_harness
        seen.update(backends=backends, kept=kept)
        new = size(256).updated(scope=plan.FORMATION)
        on_size(new)
        return {"c10d": [*kept["c10d"], new]}

    monkeypatch.setattr(measure, "sweep", fake_sweep)
    monkeypatch.setattr(measure, "validate", lambda *_: [])
    args = argparse.Namespace(rdzv_sizes=None, scale_rdzv=True, rdzv_resume=True, rdzv_backends=("c10d",),
                              out=tmp_path)
    measure.measure(args, tmp_path, results, lambda _: None,
                    save=lambda r: write_json(r, tmp_path / "results.json"))
    section = results["rdzv_scale"]
    assert seen["backends"] == ("c10d",) and [s.nodes for s in seen["kept"]["c10d"]] == [128]
    assert [s["nodes"] for s in section["sizes"]["c10d"]] == [128, 256]
    assert section["sizes"]["etcd-v2"] == [{**etcd.to_json(), "date": "2026-11-26"}]
    assert section["command"] == "python -m bench --scale-rdzv --rdzv-resume --rdzv-backends c10d"
    assert "whose sizes it kept: c10d 128 nodes" in section["resumed"]
    assert section["not_swept"] == "etcd-v2, whose sizes were kept as measured (2026-11-26)"
    assert "interrupted" not in section
    on_disk = json.loads((tmp_path / "results.json").read_text())["rdzv_scale"]  # written as the size ended
    assert [s["nodes"] for s in on_disk["sizes"]["c10d"]] == [128, 256] and on_disk["sizes"]["etcd-v2"]


def test_backends_to_sweep_are_checked(tmp_path, capsys):
    from bench.__main__ import main

    for given in ("zookeeper", ""):
        with pytest.raises(SystemExit) as exc:
            main(["--scale-rdzv", "--rdzv-backends", given, "--out", str(tmp_path)])
        assert exc.value.code == 2 and "--rdzv-backends" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["--rdzv-backends", "c10d", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "with --scale-rdzv" in capsys.readouterr().err
