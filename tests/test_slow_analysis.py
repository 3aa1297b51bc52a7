"""Throughput around a slowdown and detection of a hung rank, from the timelines of real runs
(tests/fixtures/runs/straggler-half-speed, hung-rank-20s) and from made-up ones."""
from __future__ import annotations

import json
from pathlib import Path

from elastic_chaos.analysis.hang import hang_detection
from elastic_chaos.analysis.throughput import Throughput, step_rate, throughput
from elastic_chaos.events import Event, FaultEv, ProgressEv
from elastic_chaos.reporting.load import load_run

RUNS = Path(__file__).parent / "fixtures" / "runs"


def steps(rank: int, node: str, times: list[float], sync: list[float] | None = None) -> list[Event]:
    return [Event.make(ProgressEv.STEP, t, node, {"step": i + 1, "rank": rank, "pid": 100 + rank,
                                                  **({"sync_s": sync[i]} if sync else {})})
            for i, t in enumerate(times)]


def test_a_half_speed_node_halved_the_recorded_jobs_step_rate_and_was_named():
    run = load_run(RUNS / "straggler-half-speed")
    fault = run.result.faults[0]
    r = throughput(run.events, target=fault.record.target, injected_at=fault.record.injected_at, factor=2.0)
    assert r.drop is not None and abs(r.drop - 0.5) <= 0.1
    assert (r.slow_rank, r.slow_node) == (1, "node-1")
    assert r.slow_own_during_s > 2 * r.slow_own_before_s
    assert r.rate_after > 0.9 * r.rate_before


def test_report_json_holds_the_same_throughput():
    run = load_run(RUNS / "straggler-half-speed")
    raw = json.loads((RUNS / "straggler-half-speed" / "report.json").read_text())
    assert run.result.faults[0].measured["throughput"].slow_node == "node-1"
    assert run.result.faults[0].measured["throughput"].to_json() == raw["faults"][0]["throughput"]


def test_the_rate_of_a_window_counts_each_step_once():
    evs = steps(0, "n0", [0.0, 0.1, 0.2, 0.3]) + steps(1, "n1", [0.01, 0.11, 0.21, 0.31])
    assert abs(step_rate(evs, 0.0, 1.0) - 10.0) < 1e-6
    assert step_rate(evs, 0.05, 0.1) is None


def test_the_rank_with_the_largest_own_time_is_the_one_waited_for():
    times = [i * 0.2 for i in range(10)]
    evs = steps(0, "n0", times, [0.19] * 10) + steps(1, "n1", times, [0.01] * 10)
    evs.append(Event.make(FaultEv.REVERTED, 5.0, "n1", {"fault": "straggler"}))
    r = throughput(evs, target="n1", injected_at=0.0, factor=2.0)
    assert (r.slow_rank, r.slow_node) == (1, "n1") and abs(r.slow_own_during_s - 0.19) < 1e-6


def test_without_sync_s_the_slow_rank_is_not_guessed():
    evs = steps(0, "n0", [i * 0.2 for i in range(10)])
    r = throughput(evs, target="n1", injected_at=0.0, factor=2.0)
    assert r.slow_rank is None and any("sync_s" in m for m in r.missing)


def test_throughput_reads_back_from_json():
    r = Throughput("n1", 1.0, restored_at=2.0, factor=2.0, rate_before=10.0, drop=0.5, slow_rank=1, slow_node="n1")
    back = Throughput.from_json("n1", 1.0, r.to_json())
    assert (back.rate_before, back.drop, back.slow_rank, back.slow_node, back.factor) == (10.0, 0.5, 1, "n1", 2.0)


def test_the_recorded_hang_was_found_by_the_peers_collective_timeout_at_20_s():
    run = load_run(RUNS / "hung-rank-20s")
    f = run.result.faults[0]
    h = hang_detection(run.events, target=f.record.target, injected_at=f.record.injected_at, pg_timeout_s=20.0,
                       hung_pid=f.record.detail["pid"])
    assert h.causes == ["timeout"] and not h.reported_early
    assert abs(h.timed_out_s - 20.0) <= 1.0 and abs(f.recovery.detect_s - 20.0) <= 3.0
    assert h.hung_ended_s >= 20.0 + 25.0, "the stopped worker ignores SIGTERM: its agent waits ~30 s to kill it"


def test_a_hung_worker_reported_failed_before_any_timeout_is_no_hang():
    evs = [Event.make(ProgressEv.WORKER_ERROR, 25.0, "n0", {"rank": 0, "cause": "timeout", "message": "Timed out"}),
           Event.make(FaultEv.INJECTED, 0.0, "n1", {"fault": "hung-rank"})]
    from elastic_chaos.events import AgentEv
    evs.append(Event.make(AgentEv.WORKER_FAILED, 3.0, "n1", {"pid": 42, "exitcode": -9, "local_rank": 0}))
    h = hang_detection(evs, target="n1", injected_at=0.0, pg_timeout_s=20.0, hung_pid=42)
    assert h.reported_early
