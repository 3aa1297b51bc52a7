"""Recovery metrics computed from hand-built timelines (DESIGN.md, "Metrics")."""
from __future__ import annotations

import pytest

from elastic_chaos.analysis.recovery_analysis import analyze, analyze_fault
from elastic_chaos.events import AgentEv, CheckpointEv, Event, FaultEv, NodeEv, ProgressEv, RdzvEv, Source

F = 100.0  # the fault's time in every timeline below


def step(t: float, n: int, *, pid: int, ws: int = 2, node: str = "node-0", rank: int = 0) -> Event:
    return Event.make(ProgressEv.STEP, t, node, {"step": n, "pid": pid, "world_size": ws, "rank": rank})


def fault(t: float = F, target: str = "node-1") -> Event:
    return Event.make(FaultEv.INJECTED, t, target, {"fault": "kill-node"})


def loaded(t: float, n: int, node: str = "node-0") -> Event:
    return Event.make(CheckpointEv.LOADED, t, node, {"step": n, "rank": 0})


def healthy_recovery() -> list[Event]:
    """Steps 1..50 before F at world size 2, resume from 40 at world size 1."""
    ev = [step(50 + i, i, pid=11) for i in range(1, 51)]
    ev += [
        fault(),
        Event.make(AgentEv.WORKER_GROUP_FAILED, F + 1.0, "node-0", {"attempts_left": 3}),
        Event.make(RdzvEv.ROUND_COMPLETE, F + 4.0, None, {"round": 1, "participants": []}),
        loaded(F + 9.0, 40),
        step(F + 10.0, 41, pid=22, ws=1),
    ]
    ev += [step(F + 10.0 + i * 0.1, 41 + i, pid=22, ws=1) for i in range(1, 15)]
    return ev


def test_each_phase_is_the_gap_between_consecutive_marks():
    rec = analyze_fault(healthy_recovery(), fault="kill-node", target="node-1", injected_at=F)
    assert rec.detect_s == pytest.approx(1.0)
    assert rec.rendezvous_s == pytest.approx(4.0)
    assert rec.recovery_s == pytest.approx(10.0)
    # step 51 (> pre-fault 50) is the 10th step after the restart
    assert rec.regain_s == pytest.approx(11.0)
    assert rec.phases == pytest.approx({"detect": 1.0, "exit": None, "shutdown": None, "rendezvous": 3.0,
                                        "restart": 6.0, "retrain": 1.0, "stall": None})
    assert set(rec.not_applicable) == {"exit", "shutdown", "stall"}   # no collective error, no forced kill
    assert sum(v for v in rec.phases.values() if v is not None) == pytest.approx(rec.regain_s)


def test_lost_steps_are_measured_from_the_checkpoint_resumed():
    rec = analyze_fault(healthy_recovery(), fault="kill-node", target="node-1", injected_at=F)
    assert rec.pre_step == 50
    assert rec.resumed_from_step == 40
    assert rec.lost_steps == 10
    assert rec.missing == []


def test_world_sizes_before_and_after():
    rec = analyze_fault(healthy_recovery(), fault="kill-node", target="node-1", injected_at=F)
    assert (rec.world_size_before, rec.world_size_after, rec.world_size_final) == (2, 1, 1)
    assert rec.restarts_used == 1


def test_no_recovery_leaves_metrics_none_and_says_why():
    ev = [step(50 + i, i, pid=11) for i in range(1, 51)] + [fault()]
    rec = analyze_fault(ev, fault="kill-node", target="node-1", injected_at=F)
    assert rec.recovered is False
    assert rec.recovery_s is None and rec.regain_s is None and rec.lost_steps is None
    assert {p: v for p, v in rec.phases.items() if p not in rec.not_applicable} == {
        "detect": None, "rendezvous": None, "restart": None, "retrain": None}
    assert "no restarted worker completed a step" in rec.missing


def test_fault_before_the_first_step_has_no_steady_state():
    ev = [fault(F), loaded(F + 8, 0), step(F + 9, 1, pid=22, ws=1)]
    rec = analyze_fault(ev, fault="kill-node", target="node-1", injected_at=F)
    assert rec.world_size_before is None
    assert any("no steady state" in m for m in rec.missing)
    assert rec.recovery_s == pytest.approx(9.0)
    assert rec.lost_steps == 0


def test_a_later_phase_without_its_predecessor_is_not_invented():
    ev = [step(50 + i, i, pid=11) for i in range(1, 51)]
    ev += [fault(), loaded(F + 9.0, 40), step(F + 10.0, 41, pid=22, ws=1)]  # no detect, no rendezvous evidence
    rec = analyze_fault(ev, fault="kill-node", target="node-1", injected_at=F)
    assert rec.recovery_s == pytest.approx(10.0)
    assert rec.phases["detect"] is None and rec.phases["restart"] is None


def test_events_of_the_killed_node_do_not_count_as_detection():
    ev = healthy_recovery()
    ev.append(Event.make(AgentEv.WORKER_FAILED, F + 0.1, "node-1"))  # the victim's own agent
    rec = analyze_fault(ev, fault="kill-node", target="node-1", injected_at=F)
    assert rec.detect_s == pytest.approx(1.0)


def test_resume_step_is_inferred_and_flagged_without_a_loaded_event():
    ev = [e for e in healthy_recovery() if e.type.source != Source.CHECKPOINT]
    rec = analyze_fault(ev, fault="kill-node", target="node-1", injected_at=F)
    assert rec.resumed_from_step == 40
    assert any("inferred" in m for m in rec.missing)


def test_replacement_time_is_when_the_new_node_is_in_a_complete_round():
    ev = healthy_recovery()
    ev += [
        Event.make(NodeEv.STARTED, F + 5.0, "node-2", {"replaces": "node-1"}),
        Event.make(RdzvEv.ROUND_COMPLETE, F + 20.0, None,
                   {"round": 2, "participants": [{"node": "node-0"}, {"node": "node-2"}]}),
        step(F + 30.0, 60, pid=33, ws=2),
    ]
    rec = analyze_fault(ev, fault="kill-node", target="node-1", injected_at=F)
    assert rec.replacement_s == pytest.approx(20.0)
    assert rec.world_size_final == 2


def test_two_faults_are_analysed_separately():
    ev = healthy_recovery()
    g = 200.0
    ev += [step(g - 1, 80, pid=22, ws=1), fault(g, "node-0"),
           Event.make(AgentEv.WORKER_GROUP_FAILED, g + 2, "node-2"),
           Event.make(RdzvEv.ROUND_COMPLETE, g + 3, None, {"round": 2, "participants": []}),
           loaded(g + 8, 80, node="node-2"), step(g + 9, 81, pid=44, ws=1, node="node-2")]
    first, second = analyze(ev)
    assert first.injected_at == F and second.injected_at == g
    assert first.world_size_final == 1  # bounded by the second fault
    assert second.pre_step == 80 and second.lost_steps == 0
    assert second.detect_s == pytest.approx(2.0) and second.recovery_s == pytest.approx(9.0)


def test_a_triggered_second_fault_is_part_of_the_first_ones_recovery():
    ev = healthy_recovery()
    # a cascade fired by a trigger 2 s after the first fault, before the recovery
    cascade = {"fault": "kill-node", "trigger": "during a re-rendezvous"}
    ev.append(Event.make(FaultEv.INJECTED, F + 2.0, "node-2", cascade))
    first, second = analyze(ev)
    assert first.recovery_s == pytest.approx(10.0) and first.world_size_after == 1
    assert second.recovery_s == pytest.approx(8.0)
    assert not first.overtaken and not second.overtaken


def test_an_independent_second_fault_ends_the_first_ones_window():
    ev = healthy_recovery()
    ev.append(Event.make(FaultEv.INJECTED, F + 2.0, "node-2", {"fault": "kill-node"}))
    first, second = analyze(ev)
    assert first.recovery_s is None and first.overtaken and not second.overtaken
    assert "the next fault came before this one's recovery completed" in first.missing
