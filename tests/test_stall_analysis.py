"""A fault that ends on its own is an outcome (a stall), and a step reported after its
worker's collective failed is not progress (hand-built timelines; elastic_chaos.analysis.phases)."""
from __future__ import annotations

import pytest

from elastic_chaos.analysis.recovery import PHASES, RecoveryPath
from elastic_chaos.analysis.recovery_analysis import analyze_fault
from elastic_chaos.events import AgentEv, CheckpointEv, Event, FaultEv, ProgressEv, RdzvEv, RunnerEv

F = 100.0


def step(t: float, n: int, *, pid: int, node: str, rank: int, ws: int = 2) -> Event:
    return Event.make(ProgressEv.STEP, t, node, {"step": n, "pid": pid, "world_size": ws, "rank": rank})


def both(t: float, n: int, ws: int = 2, pids: tuple[int, int] = (11, 12)) -> list[Event]:
    return [step(t, n, pid=pids[0], node="node-0", rank=0, ws=ws),
            step(t + 0.01, n, pid=pids[1], node="node-1", rank=1, ws=ws)]


def freeze(until_thaw: float = 12.0, *, revert_action: str = "sigcont-all") -> list[Event]:
    """Steps 1..50 at 0.1 s; node-1 frozen at F (step 51 in flight on node-0); thawed
    after ``until_thaw``; the same workers train on."""
    ev = [e for i in range(1, 51) for e in both(F - 5.0 + i * 0.1, i)]
    ev.append(Event.make(FaultEv.INJECTED, F, "node-1", {"fault": "freeze"}))
    thaw = F + until_thaw
    ev.append(Event.make(FaultEv.REVERTED, thaw, "node-1", {"fault": "freeze", "action": revert_action}))
    ev.append(step(thaw + 0.05, 51, pid=12, node="node-1", rank=1))     # the first step after the thaw
    ev.append(step(thaw + 0.06, 51, pid=11, node="node-0", rank=0))
    ev += [e for i in range(52, 70) for e in both(thaw + 0.06 + (i - 51) * 0.1, i)]
    return ev


def test_a_thawed_freeze_is_a_stall_with_nothing_lost():
    rec = analyze_fault(freeze(), fault="freeze", target="node-1", injected_at=F)
    assert rec.path is RecoveryPath.STALL and rec.recovered
    assert rec.lost_steps == 0 and rec.pre_step == 50 and rec.resumed_from_step == 50
    assert rec.regain_s == pytest.approx(12.05) and rec.phases["stall"] == pytest.approx(12.05)
    assert set(rec.not_applicable) == set(PHASES) - {"stall"}
    assert rec.world_size_before == rec.world_size_after == 2 and rec.restarts_used == 0
    assert rec.missing == [] and "stalled 12.0 s" in rec.notes[0]


def test_a_revert_with_nothing_to_undo_or_at_teardown_ends_no_fault():
    nothing = analyze_fault(freeze(revert_action="nothing-to-thaw"), fault="freeze", target="node-1", injected_at=F)
    assert nothing.path is None
    events = freeze()
    events.append(Event.make(RunnerEv.PHASE, F + 11.0, None, {"phase": "teardown"}))
    assert analyze_fault(events, fault="freeze", target="node-1", injected_at=F).path is None


def test_a_restart_is_no_stall():
    events = freeze() + [Event.make(AgentEv.WORKER_GROUP_FAILED, F + 10.0, "node-0", {"attempts_left": 3})]
    rec = analyze_fault(events, fault="freeze", target="node-1", injected_at=F)
    assert rec.path is not RecoveryPath.STALL and "stall" in rec.not_applicable


def test_a_shrunken_world_after_the_thaw_is_no_stall():
    ev = [e for i in range(1, 51) for e in both(F - 5.0 + i * 0.1, i)]
    ev += [Event.make(FaultEv.INJECTED, F, "node-1", {"fault": "freeze"}),
           Event.make(FaultEv.REVERTED, F + 12.0, "node-1", {"fault": "freeze", "action": "sigcont-all"}),
           step(F + 12.1, 51, pid=11, node="node-0", rank=0, ws=1)]
    assert analyze_fault(ev, fault="freeze", target="node-1", injected_at=F).path is None


def test_a_store_outage_that_training_rode_out_stalls_for_one_step_only():
    ev = [e for i in range(1, 151) for e in both(F - 5.0 + i * 0.1, i)]   # trains on throughout
    ev += [Event.make(FaultEv.INJECTED, F, "etcd", {"fault": "etcd-outage"}),
           Event.make(FaultEv.REVERTED, F + 8.0, "etcd", {"fault": "etcd-outage", "action": "started"})]
    rec = analyze_fault(ev, fault="etcd-outage", target="etcd", injected_at=F)
    assert rec.path is RecoveryPath.STALL and rec.lost_steps == 0
    assert rec.phases["stall"] is not None and rec.phases["stall"] < 0.5    # one step time, not 8 s


def nccl_spot(phantom: bool) -> list[Event]:
    """node-1 leaves gracefully after saving step 50; node-0's step 51 was blocked in the
    failed all-reduce; an aborted communicator lets it report 51 just before teardown."""
    ev = [e for i in range(1, 51) for e in both(F - 5.0 + i * 0.1, i)]
    ev += [Event.make(FaultEv.INJECTED, F, "node-1", {"fault": "spot-interruption"}),
           Event.make(ProgressEv.WORKER_ERROR, F + 0.5, "node-0",
                      {"via": "nccl", "rank": 0, "cause": "unknown", "error": "NCCL watchdog"})]
    if phantom:
        ev.append(step(F + 60.4, 51, pid=11, node="node-0", rank=0))
    ev += [Event.make(AgentEv.WORKER_FAILED, F + 60.6, "node-0", {"exitcode": -6, "pid": 11}),
           Event.make(RdzvEv.ROUND_COMPLETE, F + 62.0, None, {"round": 1, "participants": []}),
           Event.make(ProgressEv.START, F + 65.0, "node-0", {"pid": 21}),
           Event.make(CheckpointEv.LOADED, F + 70.9, "node-0", {"step": 50}),
           step(F + 71.0, 51, pid=21, node="node-0", rank=0, ws=1),
           step(F + 71.1, 52, pid=21, node="node-0", rank=0, ws=1)]
    return ev


def test_a_step_reported_after_its_collective_failed_is_not_counted_as_lost():
    rec = analyze_fault(nccl_spot(phantom=True), fault="spot-interruption", target="node-1", injected_at=F)
    assert rec.pre_step == 50 and rec.resumed_from_step == 50 and rec.lost_steps == 0 and rec.unsettled_steps == 1
    assert any("step 51 on node-0" in n and "never all-reduced" in n for n in rec.notes)
    assert rec.phases["exit"] == pytest.approx(60.1)


def test_without_such_a_step_nothing_is_discounted():
    rec = analyze_fault(nccl_spot(phantom=False), fault="spot-interruption", target="node-1", injected_at=F)
    assert rec.lost_steps == 0 and rec.notes == []


# -- a fault the job trained through (a slow volume when the next fault came) ------------------
def slow_volume_then(next_fault_at: float, *, target_stops: bool = False) -> list[Event]:
    """Steps 1..50 at 0.1 s before F; a fault at F on ``node-1`` (a slow volume, or a kill when
    ``target_stops``); both nodes train on (node-0 alone when ``target_stops``) at world size 2."""
    ev = [e for i in range(1, 51) for e in both(F - 5.0 + i * 0.1, i)]
    ev.append(Event.make(FaultEv.INJECTED, F, "node-1", {"fault": "slow-storage"}))
    for i in range(51, 51 + int((next_fault_at - F) / 0.1) - 1):
        t = F + (i - 50) * 0.1
        ev += [step(t, i, pid=11, node="node-0", rank=0)] if target_stops else both(t, i)
    ev.append(Event.make(FaultEv.INJECTED, next_fault_at, "node-0", {"fault": "spot-interruption"}))
    return ev


def test_a_slow_volume_still_in_force_when_the_next_fault_came_was_trained_through_not_unrecovered():
    events = slow_volume_then(F + 8.0)
    # the next fault's SIGTERM, logged by the agent in the same millisecond: stamped just before it
    events.append(Event.make(AgentEv.CLOSING_WORKER, F + 8.0 - 0.0005, "node-0", {"pid": 11, "signal": "SIGTERM"}))
    rec = analyze_fault(events, fault="slow-storage", target="node-1", injected_at=F, until=F + 8.0)
    assert rec.path is RecoveryPath.THROUGH and rec.recovered and not rec.overtaken
    assert rec.lost_steps == 0 and rec.pre_step == 50 and rec.regain_s == pytest.approx(0.1)
    assert rec.missing == [] and set(rec.not_applicable) == set(PHASES)
    assert "trained on through the slow-storage" in rec.notes[0] and "next fault (+8.0 s)" in rec.notes[0]


def test_a_node_that_stopped_stepping_was_not_trained_through():
    rec = analyze_fault(slow_volume_then(F + 8.0, target_stops=True), fault="kill-node", target="node-1",
                        injected_at=F, until=F + 8.0)
    assert rec.path is None and rec.overtaken and "no survivor noticed the fault" in rec.missing


def test_a_restart_inside_the_window_or_a_window_still_open_is_not_judged_trained_through():
    events = slow_volume_then(F + 8.0)
    events.append(Event.make(AgentEv.WORKERS_STOPPING, F + 6.0, "node-0", {}))
    assert analyze_fault(events, fault="slow-storage", target="node-1", injected_at=F,
                         until=F + 8.0).path is not RecoveryPath.THROUGH
    # a live run (no next fault, no teardown yet): a spot notice's node trains on until its SIGTERM
    live = [e for e in slow_volume_then(F + 8.0) if e.type != FaultEv.INJECTED or e.t == F]
    assert analyze_fault(live, fault="spot-interruption", target="node-1", injected_at=F).path is None
    ended = [*live, Event.make(RunnerEv.PHASE, F + 7.0, None, {"phase": "teardown"})]
    assert analyze_fault(ended, fault="slow-storage", target="node-1", injected_at=F).path is RecoveryPath.THROUGH
