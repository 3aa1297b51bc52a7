"""A spot interruption whose node left on the notice (--leave-on-notice), from hand-built timelines: the survivors
re-formed and trained again before the termination (the fault's time), so the recovery counts from the notice
the node acted on, and the termination itself cost nothing."""
from __future__ import annotations

import pytest

from elastic_chaos.analysis.recovery import Recovery
from elastic_chaos.analysis.recovery_analysis import analyze_fault
from elastic_chaos.events import AgentEv, CheckpointEv, Event, FaultEv, NodeEv, ProgressEv, RdzvEv

F = 100.0
"""The termination (SIGTERM): the fault record's injected_at."""
NOTICE = 92.5
"""The interruption notice, 7.5 s before it."""


def step(t: float, n: int, *, pid: int, ws: int = 2, node: str = "node-0", rank: int = 0) -> Event:
    return Event.make(ProgressEv.STEP, t, node, {"step": n, "pid": pid, "world_size": ws, "rank": rank})


def interrupted(acted_at: float | None) -> list[Event]:
    """Steps 1..42 at world size 2; the notice for node-1 at NOTICE; its agent takes a death signal at
    ``acted_at`` (None: only at the termination), its worker saves step 43 and exits; node-0 fails, re-forms
    alone, loads step 43 and trains on."""
    ev = [step(50 + i, i, pid=11) for i in range(1, 43)]
    ev += [step(50 + i, i, pid=12, node="node-1", rank=1) for i in range(1, 43)]
    gone = acted_at if acted_at is not None else F
    ev += [
        Event.make(NodeEv.NOTICE, NOTICE, "node-1", {"notice": "interruption", "terminate_at": F}),
        Event.make(AgentEv.SIGNAL_RECEIVED, gone, "node-1", {"signal": 15}),
        step(gone + 0.05, 43, pid=12, node="node-1", rank=1),
        step(gone + 0.05, 43, pid=11),
        Event.make(CheckpointEv.SAVED, gone + 0.1, "node-1", {"step": 43, "rank": 1, "reason": "sigterm"}),
        Event.make(ProgressEv.WORKER_ERROR, gone + 0.3, "node-0", {"error": "RuntimeError"}),
        Event.make(AgentEv.WORKER_FAILED, gone + 0.5, "node-0", {"exitcode": 1, "local_rank": 0, "pid": 11}),
        Event.make(AgentEv.WORKER_GROUP_FAILED, gone + 0.5, "node-0", {"attempts_left": 3}),
        Event.make(RdzvEv.ROUND_COMPLETE, gone + 1.5, None, {"round": 1, "participants": []}),
        Event.make(CheckpointEv.LOADED, gone + 4.9, "node-0", {"step": 43, "rank": 0}),
        Event.make(FaultEv.INJECTED, F, "node-1", {"fault": "spot-interruption"}),
    ]
    ev += [step(gone + 5.0 + 0.1 * i, 44 + i, pid=22, ws=1) for i in range(60)]
    return ev


def measure(events: list[Event]) -> Recovery:
    return analyze_fault(events, fault="spot-interruption", target="node-1", injected_at=F)


def test_a_node_that_left_on_the_notice_is_measured_from_the_notice():
    rec = measure(interrupted(acted_at=NOTICE + 0.1))
    assert rec.notice_lead_s == pytest.approx(F - NOTICE)
    assert rec.measured_from == pytest.approx(NOTICE)
    assert rec.detect_s == pytest.approx(0.4)
    assert rec.rendezvous_s == pytest.approx(1.6)
    assert rec.recovery_s == pytest.approx(5.1) and rec.regain_s == pytest.approx(5.1)
    assert all(v is None or v >= 0 for v in rec.phases.values())
    assert sum(v for v in rec.phases.values() if v is not None) == pytest.approx(rec.regain_s)


def test_the_termination_after_the_survivors_trained_again_cost_no_time_and_no_steps():
    rec = measure(interrupted(acted_at=NOTICE + 0.1))
    assert rec.after_termination_s == 0.0
    assert (rec.pre_step, rec.resumed_from_step, rec.lost_steps) == (43, 43, 0)
    assert (rec.world_size_before, rec.world_size_after) == (2, 1)
    (note,) = [n for n in rec.notes if "--leave-on-notice" in n]
    assert "acted on the interruption notice 7.5 s before the termination" in note
    assert "2.4 s before the termination, which then cost no time" in note


def test_the_restart_the_notice_caused_is_the_faults_not_warm_up():
    rec = measure(interrupted(acted_at=NOTICE + 0.1))
    assert (rec.restarts_before, rec.restarts_used) == (0, 1)
    assert not any("warm-up" in n for n in rec.notes)


def test_a_node_that_left_only_on_its_sigterm_is_measured_from_the_termination():
    rec = measure(interrupted(acted_at=None))
    assert rec.notice_lead_s is None and rec.after_termination_s is None
    assert rec.measured_from == F
    assert rec.rendezvous_s == pytest.approx(1.5)


def test_what_report_json_keeps_reads_back_the_same_origin():
    rec = measure(interrupted(acted_at=NOTICE + 0.1))
    back = Recovery.from_json(rec.fault, rec.target, rec.injected_at, rec.to_json())
    assert back.notice_lead_s == rec.notice_lead_s and back.measured_from == pytest.approx(rec.measured_from)
    assert back.after_termination_s == 0.0


def test_a_notice_before_an_earlier_fault_on_a_node_of_the_same_name_is_not_this_faults():
    """Pods are re-created under their name: a kill-node on worker-1 after a spot interruption of the
    worker-1 before it is measured from the kill."""
    first = interrupted(acted_at=NOTICE + 0.1)
    later = F + 60.0
    events = [*first, Event.make(FaultEv.INJECTED, later, "node-1", {"fault": "kill-node"})]
    rec = analyze_fault(events, fault="kill-node", target="node-1", injected_at=later)
    assert rec.notice_lead_s is None and rec.measured_from == later
