"""Why a job is gone, from the evidence on its timeline."""
from __future__ import annotations

from elastic_chaos.analysis.outcome import FailureCause, JobState, job_outcome
from elastic_chaos.analysis.recovery_analysis import analyze_fault
from elastic_chaos.events import AgentEv, CheckpointEv, Event, FaultEv, NodeEv, ProgressEv
from elastic_chaos.spec import JobSpec


def started(node: str) -> Event:
    return Event.make(NodeEv.STARTED, 0.0, node)


def test_a_job_with_a_live_node_is_running():
    outcome = job_outcome([started("node-0")])
    assert outcome.state is JobState.RUNNING and not outcome.state.is_terminal()


def test_spent_restarts_are_named_with_the_budget():
    ev = [started("node-0"),
          Event.make(AgentEv.WORKER_GROUP_FAILED, 10, "node-0", {"attempts_left": 1}),
          Event.make(AgentEv.AGENT_GAVE_UP, 20, "node-0"),
          Event.make(NodeEv.EXITED, 21, "node-0", {"exit_code": 1})]
    outcome = job_outcome(ev, JobSpec(nodes="1:2", max_restarts=1))
    assert outcome.failed and outcome.state.is_terminal()
    assert outcome.causes == {FailureCause.RESTARTS_EXHAUSTED}
    assert outcome.reasons == ["node-0 exhausted its restart budget: its worker group failed 2 time(s), "
                               "restarted 1 time(s) (max_restarts=1), then its agent gave up"]


def test_a_rendezvous_failure_is_named_with_its_error():
    ev = [started("node-0"), started("node-1"),
          Event.make(NodeEv.LOST, 5, "node-0", {"action": "sigkill-all"}),
          Event.make(AgentEv.RENDEZVOUS_ERROR, 6, "node-1", {"error": "RendezvousConnectionError: store gone"}),
          Event.make(NodeEv.EXITED, 7, "node-1", {"exit_code": 1})]
    outcome = job_outcome(ev)
    assert outcome.causes == {FailureCause.LOST_TO_FAULT, FailureCause.RENDEZVOUS_FAILED}
    assert outcome.reasons == ["node-0 was lost to a fault (sigkill-all)",
                               "node-1 could not rendezvous: RendezvousConnectionError: store gone"]


def test_an_agent_that_exits_without_a_known_cause_is_named_with_its_exit_code():
    ev = [started("node-0"), Event.make(NodeEv.EXITED, 7, "node-0", {"exit_code": 3})]
    outcome = job_outcome(ev)
    assert outcome.causes == {FailureCause.EXITED}
    assert outcome.reasons == ["node-0 exited with code 3"]


def test_a_finished_job_is_not_a_failure():
    ev = [started("node-0"), Event.make(ProgressEv.FINISHED, 9, "node-0", {"step": 100}),
          Event.make(NodeEv.EXITED, 10, "node-0", {"exit_code": 0})]
    outcome = job_outcome(ev)
    assert outcome.state is JobState.FINISHED and not outcome.failed and not outcome.causes


def step(t, n, pid, ws=2, node="node-0"):
    return Event.make(ProgressEv.STEP, t, node, {"step": n, "pid": pid, "world_size": ws, "rank": 0})


def test_steps_a_gracefully_stopped_worker_finishes_after_the_fault_count_as_done():
    # SIGTERM at t=100: the old workers finish step 51 and save it; the new ones resume at 51
    ev = [step(99, 50, pid=1), Event.make(FaultEv.INJECTED, 100, "node-1", {"fault": "spot-interruption"}),
          step(100.1, 51, pid=1),
          Event.make(CheckpointEv.SAVED, 100.2, "node-1", {"step": 51}),
          Event.make(CheckpointEv.LOADED, 110, "node-0", {"step": 51}), step(111, 52, pid=2, ws=1)]
    rec = analyze_fault(ev, fault="spot-interruption", target="node-1", injected_at=100.0)
    assert rec.pre_step == 51 and rec.lost_steps == 0
    assert rec.regain_s == 11.0                    # the old worker's step 51 is not a regain


def test_steps_without_pids_count_as_restarted_once_the_agent_started_workers():
    ev = [Event.make(ProgressEv.STEP, 99, "node-0", {"step": 50}),
          Event.make(FaultEv.INJECTED, 100, "node-1", {"fault": "spot-interruption"}),
          Event.make(AgentEv.WORKERS_STARTING, 105, "node-0"),
          Event.make(ProgressEv.STEP, 110, "node-0", {"step": 41})]
    rec = analyze_fault(ev, fault="kill-node", target="node-1", injected_at=100.0)
    assert rec.recovery_s == 10.0 and rec.resumed_from_step == 40
