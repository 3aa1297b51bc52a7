"""NCCL's watchdog and the agent's shutdown in node logs: the lines, and the recovery
phases they split (tests/fixtures/runs/nccl-*: reconstructed from issue 16, see its README)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from elastic_chaos.events import AgentEv, Event, ProgressEv, Source, Timeline, payload_json
from elastic_chaos.reporting import render_folder
from elastic_chaos.reporting.load import load_run
from elastic_chaos.watchers.logs import LogFollower, _AgentParser, collective_cause
from elastic_chaos.watchers.nccl import nccl_cause, parse_nccl

RUNS = Path(__file__).parent / "fixtures" / "runs"
PG = "[PG ID 0 PG GUID 0(default_pg) Rank 1]"


def line(msg: str, *, at: str = "13:55:49.384372190", sev: str = "E", prefix: str = "[rank1]:") -> str:
    return f"{prefix}[{sev}0429 {at} ProcessGroupNCCL.cpp:1743] {msg}"


def test_a_watchdog_timeout_is_a_collective_timeout_with_the_lines_own_time():
    ev = parse_nccl(line("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4, "
                         "OpType=ALLREDUCE, NumelIn=112, NumelOut=112, Timeout(ms)=10000) ran for 10010 "
                         "milliseconds before timing out."), "node-0")
    later = parse_nccl(line(f"{PG} First PG on this rank to signal dumping.", at="13:55:50.384372690"), "node-0")
    assert ev is not None and ev.type == ProgressEv.WORKER_ERROR
    assert ev.data.cause == "timeout" and ev.data.via == "nccl" and ev.data.rank == 1
    assert later is not None and later.t - ev.t == pytest.approx(1.0000005, abs=1e-7)   # nanoseconds kept


def test_a_pods_watchdog_line_is_read_in_the_zone_its_node_logs_in():
    import datetime
    msg = line("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4) ran for 10010 ms")
    utc = parse_nccl(msg, "pod-0", tz=datetime.timezone.utc)
    east = parse_nccl(msg, "pod-0", tz=datetime.timezone(datetime.timedelta(hours=2)))
    assert utc is not None and east is not None and utc.t - east.t == pytest.approx(7200, abs=1e-3)
    stamp = datetime.datetime.fromtimestamp(utc.t, datetime.timezone.utc)
    assert (stamp.hour, stamp.minute, stamp.second) == (13, 55, 49)


def test_a_peer_that_exited_is_a_closed_connection_once_the_watchdog_says_so():
    first = parse_nccl(line(f"{PG} Exception (either an error or timeout) detected by watchdog at work: 12, "
                            "last enqueued NCCL work: 13, last completed NCCL work: 11."), "node-0")
    final = parse_nccl(line(f"{PG} Process group watchdog thread terminated with exception: NCCL error: remote "
                            "process exited or there was a network error, NCCL version 2.28.9"), "node-0")
    assert first is not None and first.data.cause == "unknown"      # the first line does not say which
    assert final is not None and final.data.cause == "connection_closed"


def test_the_dump_and_the_teardown_have_their_own_events():
    dump = parse_nccl(line(f"{PG} Received a dump signal due to a collective timeout from this local rank and we "
                           "will try our best to dump the debug info."), "node-0")
    down = parse_nccl(line("[Rank 1] To avoid data inconsistency, we are taking the entire process down."), "n")
    fatal = parse_nccl(line(f"{PG} [PG ID 0 PG GUID 0(default_pg) Rank 1] Terminating the process after "
                            "attempting to dump debug info, due to collective timeout or exception.", sev="F"), "n")
    assert dump is not None and dump.type == ProgressEv.NCCL_DUMP
    assert down is not None and down.type == ProgressEv.NCCL_TEARDOWN
    assert fatal is not None and fatal.type == ProgressEv.NCCL_TEARDOWN


def test_a_stuck_watchdog_names_the_heartbeat():
    ev = parse_nccl(line(f"{PG} ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress "
                         "in monitoring enqueued collectives. ... (TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC)"), "node-0")
    assert ev is not None and ev.data.cause == "watchdog_stuck"
    assert nccl_cause("Heartbeat monitor timed out! Process will be terminated") == "watchdog_stuck"


def test_other_lines_are_left_alone():
    assert parse_nccl(line("[Rank 1] Some NCCL operations have failed or timed out."), "n") is None
    assert parse_nccl(line(f"{PG} ProcessGroupNCCL initialized with following options", sev="I"), "n") is None
    assert parse_nccl("[rank1]:[E0429 13:55:49.384372190 Utils.cpp:12] Watchdog caught collective", "n") is None
    assert parse_nccl("[rank0]: RuntimeError: NCCL error", "n") is None       # a Python traceback line


def test_a_rank_prefix_is_optional():
    ev = parse_nccl(line(f"{PG} Watchdog caught collective operation timeout", prefix=""), "node-0")
    assert ev is not None and ev.data.rank == 1


def test_a_python_side_nccl_error_about_a_dead_peer_is_a_closed_connection():
    assert collective_cause("NCCL error in: ProcessGroupNCCL.cpp:3690, remote process exited or there was a "
                            "network error, NCCL version 2.28.9") == "connection_closed"


@pytest.mark.parametrize("signal", ["15", "Signals.SIGTERM"])
def test_the_agents_shutdown_wait_is_two_events(signal):
    parser = _AgentParser("node-0")
    where = "W1122 13:30:11.700000 27436 torch/distributed/elastic/multiprocessing/api.py"
    (sent,) = parser.feed(f"{where}:1029] Sending process 27450 closing signal SIGTERM")
    (killed,) = parser.feed(f"{where}:1048] Unable to shutdown process 27450 via {signal}, forcefully exiting "
                            "via 9")
    assert sent.type == AgentEv.CLOSING_WORKER and payload_json(sent.data) == {"pid": 27450, "signal": "SIGTERM"}
    assert killed.type == AgentEv.WORKER_KILL_FORCED and killed.data.pid == 27450
    assert killed.data.kill_signal == 9


# -- the reconstructed runs --------------------------------------------------------
@pytest.mark.parametrize("name", ["nccl-kill-node-fast", "nccl-kill-node-replaced"])
def test_the_node_logs_read_back_into_the_timelines_events(name):
    """A LogFollower over the fixture's logs sees what its timeline holds (times relative
    to the first event: the logs carry no year)."""
    tl = Timeline()
    folder = RUNS / name
    follower = LogFollower(tl, lambda: {p.stem: p for p in sorted((folder / "nodes").glob("*.log"))})
    follower.poll()
    follower.finish()
    from_logs = {Source.AGENT.value, Source.PROGRESS.value, Source.CHECKPOINT.value}
    recorded = [e for e in load_run(folder).events if e.type.source in from_logs]
    assert _relative(tl.events()) == _relative(recorded)


def _relative(events: list[Event]) -> list[tuple[float, str, str | None]]:
    ordered = sorted(events, key=lambda e: (e.t, e.type.name, e.node or ""))
    t0 = ordered[0].t
    return [(round(e.t - t0, 4), e.type.name, e.node) for e in ordered]


def test_nccls_dump_wait_is_its_own_phase_not_the_rendezvous():
    rec = load_run(RUNS / "nccl-kill-node-fast").faults[0].recovery
    assert rec.detect_s == pytest.approx(0.48, abs=1e-3)                         # the watchdog saw the dead peer
    assert rec.phases["exit"] == pytest.approx(60.13, abs=1e-3)                  # ... and waited for a dump
    assert rec.phases["rendezvous"] == pytest.approx(1.27, abs=1e-3)             # fast: a 1 s last call
    assert rec.phases["restart"] == pytest.approx(9.62, abs=1e-3)
    assert set(rec.not_applicable) == {"shutdown", "stall"}
    assert sum(v for v in rec.phases.values() if v is not None) == pytest.approx(rec.regain_s)


def test_a_worker_that_ignored_sigterm_shows_the_agents_shutdown_wait():
    rec = load_run(RUNS / "nccl-kill-node-replaced").faults[0].recovery
    assert rec.phases["shutdown"] == pytest.approx(36.09, abs=1e-3)              # detect -> killed after the 30 s wait
    assert "exit" in rec.not_applicable and "stopped its workers" in rec.not_applicable["exit"]
    assert rec.phases["rendezvous"] == pytest.approx(0.88, abs=1e-3) and rec.replacement_s is not None
    assert sum(v for v in rec.phases.values() if v is not None) == pytest.approx(rec.regain_s)


def test_the_advice_names_the_nccl_knob_and_what_it_cost(tmp_path):
    shutil.copytree(RUNS / "nccl-kill-node-fast", tmp_path / "run")
    (finding,) = render_folder(tmp_path / "run", png=False).findings
    assert finding.setting == "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC" and finding.phase == "exit"
    assert finding.cost_s == pytest.approx(60.13, abs=1e-3)
    assert "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=60000 (torch's default)" in finding.text
    assert "about 1.1 s" in finding.text and "H100" in finding.text
    page = (tmp_path / "run" / "report.html").read_text()
    assert "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC" in page and ">n/a<" in page


def test_the_advice_on_a_forced_shutdown_names_the_30_s_wait(tmp_path):
    shutil.copytree(RUNS / "nccl-kill-node-replaced", tmp_path / "run")
    findings = render_folder(tmp_path / "run", png=False).findings
    (finding,) = [f for f in findings if f.phase == "shutdown"]
    assert finding.cost_s == pytest.approx(30.0, abs=1e-3) and "blocked in a collective" in finding.text
    assert not [f for f in findings if f.setting and "keep_alive" in f.setting]  # expired while nobody waited


def test_the_dump_wait_advice_counts_from_the_collectives_failure_not_from_detection():
    """A freeze is detected (the store drops the silent node) before the survivors' collective times
    out; the exit phase, counted from detection, then holds that wait too. Seen on an H200 (freeze 30 s,
    fast preset): the advice said "the other 9.0 s were the teardown itself" of a 3.5 s exit."""
    from elastic_chaos.analysis.advice.workers import _dump_wait

    run = load_run(RUNS / "nccl-kill-node-fast")
    fault = run.faults[0]
    fault.recovery.phases["exit"] = fault.recovery.phases["exit"] + 6.0   # detected 6 s before the failure
    finding = _dump_wait(run, 0, fault)
    assert finding is not None and finding.cost_s == pytest.approx(66.13, abs=1e-2)   # the phase as measured
    assert finding.text.startswith("60.1 s for the worker on node-0 to exit after its collective failed")
    assert "first 6.0 s were the wait for the collective to fail" in finding.text
    assert "about 1.1 s, 59 s less" in finding.text
