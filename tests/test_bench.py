"""The benchmark's own logic (findings, results files) on hand-made figures; the
benchmark itself runs with `make bench`, not in the test suite."""
from __future__ import annotations

import json

from bench import results_file
from bench.findings import recovery_findings, scale_findings, spot_summary
from bench.local_nodes import NodesRun
from bench.rdzv.section import RdzvSection
from bench.render import Plots, write_markdown
from bench.render.recovery import cluster_table
from bench.stats import summary
from elastic_chaos.events import Event, RdzvEv


def case(detect, rdzv, restart, replay, recovery, ratio):
    s = lambda v: summary([v])  # noqa: E731
    return {"detect": s(detect), "rendezvous": s(rdzv), "restart": s(restart), "retrain": s(replay),
            "recovery_s": s(recovery), "lost_steps": s(10), "ratio_to_floor": ratio}


RESULTS = {
    "floor_s": summary([5.0, 6.0, 7.0]),
    "recovery": {"etcd-v2/default/kill-node": case(1.0, 44.0, 7.0, 1.0, 52.0, 8.67),
                 "etcd-v2/fast/kill-node": case(0.5, 3.0, 6.5, 1.0, 10.0, 1.67)},
    "skipped": {"etcd-v2/fast/partition": "network namespaces need root"},
}


def test_summary_ignores_missing_values():
    assert summary([3.0, None, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert summary([None]) == {"median": None, "min": None, "max": None, "n": 0}


def test_a_median_is_a_measured_value_the_audits_nearest_rank():
    # one statistic everywhere (elastic_chaos.analysis.stats): of an even count, the lower middle value, never a mean
    assert summary([4.0, 1.0, 3.0, 2.0])["median"] == 2.0
    assert summary([1.0, 2.0, 3.0, 4.0, 5.0])["median"] == 3.0


def test_findings_name_the_dominant_phase_and_the_preset_gain():
    found = recovery_findings(RESULTS)
    assert "etcd-v2/default/kill-node: the rendezvous phase dominates (44.0 s of 53.0 s)" in found
    assert any("fast preset recovers in 10.0 s vs 52.0 s" in f and "5.2x" in f for f in found)


def test_a_missed_floor_target_says_which_phase_stands_in_the_way():
    (missed,) = [f for f in recovery_findings(RESULTS) if "target <= 1.5x" in f]
    assert "NOT met" in missed and "the rendezvous phase costs the most (3.0 s)" in missed


def test_a_met_target_says_so():
    results = json.loads(json.dumps(RESULTS))
    results["recovery"]["etcd-v2/fast/kill-node"]["ratio_to_floor"] = 1.3
    assert any(f.endswith(": met") for f in recovery_findings(results))


def test_partition_findings_explain_where_the_backends_detect_differently():
    results = json.loads(json.dumps(RESULTS))
    results["recovery"]["etcd-v2/default/partition"] = case(15.0, 75.0, 3.0, 1.0, 93.0, 40.0)
    results["recovery"]["c10d/default/partition"] = case(60.0, 30.0, 3.0, 1.0, 93.0, 40.0)
    (found,) = [f for f in recovery_findings(results) if f.startswith("default/partition")]
    assert "detect 15.0 s on etcd-v2 vs 60.0 s on c10d" in found and "--pg-timeout" in found
    results["recovery"]["c10d/default/partition"] = case(15.5, 75.0, 3.0, 1.0, 93.0, 40.0)
    assert not [f for f in recovery_findings(results) if f.startswith("default/partition")]


def test_render_recomputes_findings_from_results_json(tmp_path, capsys):
    from bench.__main__ import main
    assert main(["--render", "--out", str(tmp_path)]) == 2
    assert "run `make bench`" in capsys.readouterr().err
    results_file.write_json(dict(RESULTS, findings=["stale"]), tmp_path / "results.json")
    assert main(["--render", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "RESULTS.md").read_text()
    assert "stale" not in md and "the rendezvous phase dominates" in md


def test_scale_findings_name_the_largest_size_and_failures():
    found = scale_findings([NodesRun(2, ok=True, formation_s=20.0, recovery_s=9.0, memory_per_node_mb=500),
                            NodesRun(8, ok=True, formation_s=50.0, recovery_s=14.0, memory_per_node_mb=480),
                            NodesRun(16, ok=False, error="timed out after 600s")])
    assert found[0].startswith("largest size that formed and recovered: 8 nodes")
    assert any("5.0 s per node" in f for f in found)
    assert found[-1] == "16 nodes did not complete: timed out after 600s"


def test_results_files_are_written(tmp_path):
    results = dict(RESULTS, findings=recovery_findings(RESULTS), date="2026-11-22", wall_s=10)
    results_file.write_json(results, tmp_path / "results.json")
    write_markdown(results, tmp_path / "RESULTS.md")
    loaded = json.loads((tmp_path / "results.json").read_text())
    assert loaded["recovery"]["etcd-v2/fast/kill-node"]["recovery_s"] == {"median": 10.0, "min": 10.0,
                                                                          "max": 10.0, "n": 1}
    md = (tmp_path / "RESULTS.md").read_text()
    # the limit columns empty: written without bench.results_file.derive (bench/limits.py)
    assert "| etcd-v2/fast/kill-node | 0.5 | - | - | 3.0 | 6.5 | 1.0 | - | 10.0 | - | - | 1.67 | 10.0 | 1 |" in md
    assert "skipped: network namespaces need root" in md


def test_fidelity_compares_with_the_agents_own_stamps_and_keeps_store_detections_apart(tmp_path):
    """On a committed real run; then the same run as if etcd had shown the loss first."""
    import shutil
    from pathlib import Path

    from bench import fidelity
    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "fixtures" / "runs" / "kill-node-shrink", run)
    exact = fidelity.fidelity([run])
    assert exact["worst_abs_error"]["detect_s"] < 0.01 and exact["store_detections"]["faults"] == 0

    report_path = run / "report.json"
    data = json.loads(report_path.read_text())
    fault = data["faults"][0]
    agents_said = fault["metrics"]["detect_s"]
    seen = fault["injected_at"] + 0.2  # a keep-alive expiry seen in etcd before any agent logged a failure
    lines = (run / "timeline.jsonl").read_text().splitlines()
    lines.append(json.dumps(Event.make(RdzvEv.STATE, seen, None,
                                       {"round": 0, "complete": True, "closed": False}).to_json()))
    lines.sort(key=lambda line: json.loads(line)["t"])  # the timeline is in arrival order
    (run / "timeline.jsonl").write_text("\n".join(lines) + "\n")
    fault["metrics"]["detect_s"] = 0.2
    report_path.write_text(json.dumps(data))
    apart = fidelity.fidelity([run])
    assert "detect_s" not in apart["worst_abs_error"]
    assert apart["store_detections"]["faults"] == 1
    assert abs(apart["store_detections"]["max_lead_s"] - (agents_said - 0.2)) < 0.01


# -- GPUs: the code path, with the detection faked (no GPU here) -------------------------
def fake_gpu(name: str = "NVIDIA H100 80GB HBM3"):
    from elastic_chaos.platforms.local.gpus import Gpu, Inventory
    return lambda: Inventory((Gpu("0", name, 81559),), "580.95.05", "13.0")


def test_without_a_gpu_the_gpu_block_says_why_and_runs_nothing(tmp_path):
    from bench import gpu
    from bench.render import Plots
    from bench.render.gpu import markdown
    from elastic_chaos.platforms.local.gpus import Inventory
    ran = []
    block = gpu.measure(False, 5, tmp_path, print, detect=lambda: Inventory(why_none="nvidia-smi not found"),
                        floor=lambda *a, **k: ran.append("floor"), run_case=lambda *a, **k: ran.append("case"))
    assert block == {"skipped": "no GPU on this machine (nvidia-smi not found)"} and ran == []
    md = "\n".join(markdown({"gpu": block}, Plots()))
    assert "Not measured by `make bench`: no GPU on this machine" in md


def test_on_a_gpu_the_floor_and_every_preset_run_on_nccl(tmp_path):
    from bench import gpu
    from bench.recovery import CaseRun
    from elastic_chaos.analysis.recovery import Recovery
    from elastic_chaos.spec import PgBackend
    seen: list = []

    def floor(reps, backend):
        seen.append(("floor", backend))
        return {"floor_s": summary([9.5]), "parts": {}}

    def run_case(case, reps, out, say):
        seen.append((case.key, case.pg_backend, out.name))
        rec = Recovery("kill-node", "node-1", 0.0, recovery_s=12.0, regain_s=13.0, lost_steps=0,
                       phases={"detect": 0.5, "exit": 1.1, "rendezvous": 1.9, "restart": 9.6, "retrain": 1.0})
        return CaseRun([rec], [])

    block = gpu.measure(False, 1, tmp_path, lambda s: None, detect=fake_gpu(), floor=floor, run_case=run_case)
    assert seen[0] == ("floor", "nccl")
    assert {s[0] for s in seen[1:]} == {"etcd-v2/default/kill-node", "etcd-v2/fast/kill-node",
                                         "etcd-v2/default/spot-interruption", "etcd-v2/fast/spot-interruption"}
    assert all(s[1] is PgBackend.NCCL and s[2] == "gpu" for s in seen[1:])
    assert block["device"] == "NVIDIA H100 80GB HBM3" and "share" in block["placement"]
    case = block["recovery"]["etcd-v2/fast/kill-node"]
    assert case["exit"]["median"] == 1.1 and case["ratio_to_floor"] == round(12.0 / 9.5, 2)
    results = dict(RESULTS, gpu=block, findings=[], date="2026-11-22", wall_s=1)
    write_markdown(results, tmp_path / "RESULTS.md")
    md = (tmp_path / "RESULTS.md").read_text()
    assert "## On GPU (NCCL)" in md and "Floor on NCCL: median **9.5 s**" in md
    assert "| etcd-v2/fast/kill-node | 0.5 | 1.1 | - | 1.9 | 9.6 | 1.0 | - | 12.0 |" in md
    assert "recovery 12.0 s vs 10.0 s on CPU/gloo" in md


def test_the_cpu_cases_stay_on_gloo_on_a_gpu_machine():
    from bench.recovery import cases
    from elastic_chaos.spec import PgBackend
    assert {c.pg_backend for c in cases(False)} == {PgBackend.GLOO}
def test_the_cluster_cases_stand_beside_the_same_fault_on_the_local_platform():
    results = json.loads(json.dumps(RESULTS))
    results["recovery"]["cluster:etcd-v2/fast/kill-node"] = case(0.2, 15.0, 3.0, 1.0, 19.0, 3.8)
    results["recovery"]["cluster:etcd-v2/fast/delete-pod"] = case(0.2, 9.0, 3.0, 1.0, 13.0, 2.6)
    table = "\n".join(cluster_table(results))
    assert "| kill-node | local | 0.5 | - | - | 3.0 | 6.5 | 1.0 | - | 10.0 |" in table
    assert "| kill-node | cluster | 0.2 | - | - | 15.0 | 3.0 | 1.0 | - | 19.0 |" in table
    assert "| delete-pod | local | no local counterpart |" in table
    found = recovery_findings(results)
    assert "cluster:etcd-v2/fast/kill-node: recovers in 19.0 s on the cluster vs 10.0 s locally; the rendezvous " \
           "phase differs most (+12.0 s)" in found


def test_the_replay_block_runs_one_replay_per_interval_and_renders_a_table(tmp_path):
    from types import SimpleNamespace

    from bench import replay
    from bench.render import Plots
    from bench.render.replay import markdown
    from elastic_chaos.analysis.recovery import Recovery
    from elastic_chaos.analysis.replay import ReplaySummary
    asked = []

    def execute(name, values, **kw):
        asked.append((name, values["checkpoint_every"], values["trace"].endswith("spot-3.csv")))
        every = values["checkpoint_every"]
        recs = [Recovery("kill-node", f"node-{i}", 0.0, regain_s=15.0 + i, lost_steps=every // 2) for i in range(3)]
        summary = ReplaySummary(goodput=0.5 if every == 10 else 0.3, injected=3, skipped=0, max_late_s=0.01)
        result = SimpleNamespace(passed=True, recoveries=recs, measured={"replay": summary})
        return SimpleNamespace(report=SimpleNamespace(result=result))

    block = replay.measure(False, tmp_path, lambda s: None, execute=execute, date="2026-11-23")
    assert asked == [("replay", 10, True), ("replay", 50, True)]
    md = "\n".join(markdown({"replay": block}, Plots()))
    assert "| 10 steps | 0.5 | 3 (skipped 0) | 5, 5, 5 | 16.0 | PASSED |" in md
    assert "| 50 steps | 0.3 | 3 (skipped 0) | 25, 25, 25 | 16.0 | PASSED |" in md
    assert "Not measured yet" in "\n".join(markdown({}, Plots()))


def test_the_spot_pair_is_summed_up_beside_the_floor_with_and_without_leaving():
    results = {"floor_s": summary([2.0]),
               "recovery": {"etcd-v2/fast/spot-interruption": case(0.6, 5.2, 2.2, 0.0, 8.0, 4.0),
                            "etcd-v2/fast/spot-interruption+leave": {**case(0.6, 1.4, 4.0, 0.0, 6.0, 3.0),
                                                                     "departed_exit_s": summary([4.5])}}}
    (line,) = spot_summary(results)
    assert line == ("etcd-v2/fast/spot-interruption: floor 2.0 s | without leaving the rendezvous 8.0 s = 4.0x "
                    "| with --leave-on-sigterm 6.0 s = 3.0x the floor (goal <= 1.5x: NOT met)")
    (finding,) = [f for f in recovery_findings(results) if "+leave: the rendezvous phase takes" in f]
    assert "the rendezvous phase takes 1.4 s instead of 5.2 s" in finding
    assert "exit 4.5 s after SIGTERM" in finding and "still exiting 2.5 s after the survivor's new round" in finding


def _rdzv(sizes: list[dict], **more) -> RdzvSection:
    """A rendezvous section holding these sizes (as results.json keeps them) and their figures."""
    from bench.rdzv.shipped import figures

    section = RdzvSection.from_json({"sizes": {"c10d": sizes}, **more})
    return section.updated(figures=figures(section.sizes, RdzvSection.from_json({})))


def test_the_rendezvous_at_scale_section_renders_from_the_figures(tmp_path):
    from bench.rdzv.findings import findings
    from bench.render.plots import rdzv as plot
    from bench.render.rdzv import markdown

    def ep(label, seconds, limited=False):
        return {"label": label, "seconds": seconds, "limited": limited, "rounds": 1}

    sizes = [{"nodes": n, "load_before": 1.0, "broke": None,
              "episodes": [ep("formation", 1 + n / 100), ep("hard 1", 5 + n / 500, n >= 64)],
              "steady": {"ops_per_s": {"state_get": float(n)}, "bytes_per_s": 50.0 * n * n, "store_cpu": 0.01,
                         "agent_cpu": 0.002, "limited": False}} for n in (8, 16, 32, 64, 128)]
    section = _rdzv(sizes, date="2026-11-25", command="python -m bench --scale-rdzv", wall_s=1,
                    validation=[{"nodes": 2, "load_avg_real": 1.0, "load_before": 1.0,
                                 "formation_s": {"real": 3.2, "harness": 3.0, "diff": -0.2},
                                 "reformation_s": {"real": 6.5, "harness": 6.1, "diff": -0.4}, "within": True}])
    assert section.figures is not None
    section = section.updated(findings=tuple(findings(section, section.figures)))
    text = "\n".join(markdown(section, [], "rdzv_scale.png"))
    assert "## Rendezvous at scale" in text and "| 128 | 1 | 2.3 | 5.3* |" in text
    assert "payload bytes as N^2.00" in text
    assert "agrees with real torchrun within 1.5 s on 1 of 1 sizes" in text
    assert plot(section.figures, tmp_path / "p.png") and (tmp_path / "p.png").stat().st_size > 0


def test_a_size_that_broke_is_not_counted_as_measured_and_its_long_reason_is_clipped_between_words():
    from bench.rdzv.findings import findings
    from bench.render.rdzv import _result

    def size(n, broke=None):
        return {"nodes": n, "load_before": 1.0, "broke": broke, "scope": "formation and steady only",
                "episodes": [{"label": "formation", "seconds": None if broke else 1.3, "limited": False, "rounds": 1}],
                "steady": None}

    why = "formation: 1024 node(s) had not formed the world of 1024 after the episode's timeout; " + "word " * 60
    section = _rdzv([size(256), size(512), size(1024, why)])
    assert section.figures is not None
    (line,) = [f for f in findings(section, section.figures) if f.startswith("c10d: ")]
    assert line.startswith("c10d: measured up to 512 nodes;") and "broke at 1024 nodes" in line
    cell = _result(section.sizes["c10d"][-1])
    assert cell.endswith("... (whole in the findings) (formation and steady only)")
    assert len(cell) < len(why) and " wor ..." not in cell and cell.count("word") < 60


def test_a_rank_exchange_timeout_is_blamed_on_torch_only_with_a_participant_seen_declared_dead():
    from bench.rdzv.findings import _why_broke

    timed_out = "formation: 3 node(s) had not formed ...; first errors: node 1: DistStoreError: ... assigned_ranks/0"
    unseen = _why_broke(timed_out, seen_dead=False)
    assert "not established" in unseen and "_sanitize" not in unseen
    seen = _why_broke(timed_out, seen_dead=True)
    assert "seen in this run" in seen and "_sanitize" in seen


def test_a_real_job_this_machine_overloaded_is_shown_but_not_judged():
    from bench.rdzv.findings import _validation_finding
    from bench.rdzv.validate import ValidationRow
    from bench.render.rdzv import validation_table

    def row(n, load, diff):
        return ValidationRow.from_json({"nodes": n, "load_avg_real": load, "within": abs(diff) <= 1.5,
                                        "restarts_replayed": True,
                                        "formation_s": {"real": 1.0 + diff, "harness": 1.0, "diff": -diff},
                                        "reformation_s": {"real": 5.0, "harness": 5.0, "diff": 0.0}})

    rows = [row(2, 0.8, 0.2), row(16, 15.25, 160.0)]
    findings = _validation_finding(rows, cores=2)
    assert findings[0].startswith("the harness agrees with real torchrun within 1.5 s on 1 of 1 sizes (2 nodes)")
    assert "real 16-node job measured this machine" in findings[1] and "load average 15.25 on 2 cores" in findings[1]
    table = "\n".join(validation_table(rows, cores=2))
    assert "| 16 | 161.0 | 1.0 | -160.0 | 5.0 | 5.0 | 0.0 | not judged | replayed | 15.25* |" in table
    assert "| 2 | 1.2 | 1.0 | -0.2 | 5.0 | 5.0 | 0.0 | yes | replayed | 0.8 |" in table
    # the same overloaded job on a machine with the cores for it is judged, and fails
    assert "on 1 of 2 sizes (2, 16 nodes); worst difference 160.0 s" in _validation_finding(rows, cores=8)[0]


def test_a_real_job_that_never_trained_is_said_not_skipped():
    from bench.rdzv.findings import findings
    from bench.render.rdzv import validation_table
    from elastic_chaos.scale.figures import Figures

    section = RdzvSection.from_json({"real": [{"nodes": 16, "ok": False,
                                               "error": "timed out after 600s waiting for training"}],
                                     "validation": [], "cores": 2})
    table = "\n".join(validation_table([], 2, section.unfinished_real))
    assert "| 16 | real job failed: timed out after 600s waiting for training |" in table
    figs = Figures("2026-11-26", "box", 2, "2.13.0", "fast", {}, {})
    assert any("the real 16-node job never trained at full size" in f for f in findings(section, figs))


def test_a_size_that_broke_says_how_long_this_machine_was_saturated_in_it():
    from bench.rdzv.findings import _machine_share, broken_episode
    from bench.rdzv.records import SizeResult

    def share(sizes):
        return _machine_share(broken_episode([SizeResult.from_json(s) for s in sizes]))

    def sizes(saturated):
        return [{"broke": "formation: ...", "episodes": [
            {"label": "formation", "saturated_s": saturated, "elapsed_s": 154.0}]}]

    assert "saturated for 154.0 s of that episode's 154.0 s (100%)" in share(sizes(154.0))
    assert "not decided here" in share(sizes(154.0))
    assert "torch's own timing, not this machine" in share(sizes(0.5))
    # a storm's 24 s at the start of a 657 s episode spent waiting out the store's timeouts: not torch's limit
    storm = share([{"broke": "hard 1: ...", "episodes": [
        {"label": "hard 1", "saturated_s": 24.14, "elapsed_s": 657.0}]}])
    assert "delay heartbeats past their expiry" in storm and "not decided here" in storm
    assert "likelier limit" not in storm
    assert share([{"broke": None, "episodes": []}]) == ""


def test_the_network_section_renders_each_setting_and_the_recovery_across_a_degraded_link(tmp_path):
    from bench import network
    from bench.render import network as render_network
    # the conditions: a clean link first (the baseline), then each delay and each loss alone
    full = network.conditions(quick=False)
    assert full[0] == (0.0, 0.0) and (100.0, 0.0) in full and (0.0, 0.05) in full
    assert [network.condition(d, loss)[0] for d, loss in full[:2]] == ["clean link", "delay 1 ms each way"]
    row = {"condition": "delay 20 ms each way", "rtt_ms": 41.6, "loss_measured": None, "rate_before": 9.9,
           "rate_during": 4.95, "step_time_ratio": 2.0, "longest_gap_s": 0.3, "restarts": 0}
    results = {"network": {"command": "python -m bench --network", "date": "2026-11-27", "window_s": 12.0,
                           "pair": ["node-0", "node-1"], "step_time": {"fast preset": [row]},
                           "recovery": [{"condition": "clean link", "regain_s": 6.1, "rendezvous_s": 3.2,
                                         "lost_steps": 4, "world_size_after": 2}]}}
    md = "\n".join(render_network.markdown(results, Plots()))
    assert "### Step time per degradation, fast preset" in md
    assert "| delay 20 ms each way | 41.6 | - | 9.9 | 4.95 | 2 | 0.3 | 0 |" in md
    assert "| clean link | 6.1 | 3.2 | 4 | 2 |" in md
    write_markdown(results, tmp_path / "RESULTS.md")
    assert "## The network between ranks" in (tmp_path / "RESULTS.md").read_text()
    skipped = render_network.markdown({"network": {"skipped": "not root"}}, Plots())
    assert "Not measured: not root." in skipped


def test_the_dcp_section_times_each_save_and_the_step_that_holds_it_against_the_other_steps(tmp_path):
    from bench import dcp
    from bench.render import dcp as render_dcp
    from elastic_chaos.events import CheckpointEv, ProgressEv
    # rank 0 steps every 10 ms; the save of step 30 is made after step 30 is reported, so step 31 holds it
    t, events = 100.0, []
    for step in range(1, 41):
        t += 0.1 if step == 31 else 0.01
        events.append(Event.make(ProgressEv.STEP, t, "node-0", {"step": step, "rank": 0, "restart_count": 0}))
        events.append(Event.make(ProgressEv.STEP, t, "node-1", {"step": step, "rank": 1, "restart_count": 0}))
        if step == 30:
            saving = {"step": 30, "path": "checkpoints/step-00000030", "reason": "periodic", "rank": 0}
            events.append(Event.make(CheckpointEv.STARTED, t + 0.001, "node-0", saving))
            events.append(Event.make(CheckpointEv.SAVED, t + 0.081, "node-0", saving))
    events.sort(key=lambda e: e.t)
    got = dcp.figures(events, first=20, last=40)
    assert got["saves"] == 1 and got["save_p50_s"] == 0.08 and got["unfinished"] == 0
    assert got["step_p50_s"] == 0.01 and got["save_step_p50_s"] == 0.1 and got["stall_p50_s"] == 0.09
    assert got["steps_timed"] == 19 and got["restarts"] == 0

    results = {"dcp": {"command": "python -m bench --dcp", "date": "2026-11-27", "load_avg_1m": 3.1, "nodes": 2,
                       "checkpoint_every": 10, "saves_asked": 30,
                       "modes": [{"mode": "dcp async", **got}]}}
    md = "\n".join(render_dcp.markdown(results, Plots()))
    assert "## Sharded saves: sync vs async DCP" in md and "load average 3.1" in md
    assert "| dcp async | 1 | 0 | 0.08 | 0.08 | 0.01 | 0.1 | 0.09 | 0.1 | 0 |" in md
    write_markdown(results, tmp_path / "RESULTS.md")
    assert "## Sharded saves: sync vs async DCP" in (tmp_path / "RESULTS.md").read_text()
    assert render_dcp.markdown({}, Plots()) == []


def test_a_harness_lead_within_the_timers_noise_is_called_noise_and_one_beyond_it_is_not():
    from bench.rdzv.findings import lead_finding, phase_sd_s
    from bench.rdzv.validate import Recorded, ValidationRow

    assert abs(phase_sd_s(1.0) - (2 / 12) ** 0.5) < 1e-9   # two uniform 0-1 s phases
    noisy = [Recorded(n, 5.0, 5.0 + d, d, 1.0) for n, d in ((2, 0.2), (4, -0.3), (8, 0.35), (16, -0.3))]
    [said] = lead_finding([], noisy, keep_alive_s=1.0, harness_kills=5)
    assert "mean -0.01 s" in said and "2 of 4 faster" in said and said.endswith("no lead beyond that noise")
    led = [Recorded(n, 5.0, 4.0, -1.0, 1.0) for n in (2, 4, 8, 16)]
    assert lead_finding([], led, keep_alive_s=1.0, harness_kills=5)[0].endswith("a difference beyond that noise")

    def replay(n, load, diff):
        return ValidationRow.from_json({"nodes": n, "load_avg_real": load,
                                        "reformation_s": {"real": 5.0, "harness": 5.0 + diff, "diff": diff}})

    ordered = lead_finding([replay(8, 5.1, -0.95), replay(2, 2.0, 0.27), replay(4, 2.6, -0.61)], noisy,
                           keep_alive_s=1.0, harness_kills=5)[1]
    assert "(load 2: +0.27 s, load 2.6: -0.61 s, load 5.1: -0.95 s)" in ordered and "grows with the load" in ordered
    mixed = lead_finding([replay(8, 5.1, 0.5), replay(2, 2.0, -0.2)], noisy, keep_alive_s=1.0, harness_kills=5)[1]
    assert mixed.endswith("no order with the load")
