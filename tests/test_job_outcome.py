"""Why a job is gone, from the evidence on its timeline."""
from __future__ import annotations

from chaos.analysis.recovery import analyze_fault, job_outcome
from chaos.events import Event
from chaos.spec import JobSpec


def started(node: str) -> Event:
    return Event(0.0, "node", "started", node, {})


def test_a_job_with_a_live_node_is_running():
    assert job_outcome([started("node-0")]).state == "running"


def test_spent_restarts_are_named_with_the_budget():
    ev = [started("node-0"),
          Event(10, "agent", "worker_group_failed", "node-0", {"attempts_left": 1}),
          Event(20, "agent", "agent_gave_up", "node-0", {}),
          Event(21, "node", "exited", "node-0", {"exit_code": 1})]
    outcome = job_outcome(ev, JobSpec(nodes="1:2", max_restarts=1))
    assert outcome.failed
    assert outcome.reasons == ["node-0 exhausted its restart budget: its worker group failed 2 time(s), "
                               "restarted 1 time(s) (max_restarts=1), then its agent gave up"]


def test_a_rendezvous_failure_is_named_with_its_error():
    ev = [started("node-0"), started("node-1"),
          Event(5, "node", "lost", "node-0", {"action": "sigkill-all"}),
          Event(6, "agent", "rendezvous_error", "node-1", {"error": "RendezvousConnectionError: store gone"}),
          Event(7, "node", "exited", "node-1", {"exit_code": 1})]
    outcome = job_outcome(ev)
    assert outcome.reasons == ["node-0 was lost to a fault (sigkill-all)",
                               "node-1 could not rendezvous: RendezvousConnectionError: store gone"]


def test_a_finished_job_is_not_a_failure():
    ev = [started("node-0"), Event(9, "progress", "finished", "node-0", {"step": 100}),
          Event(10, "node", "exited", "node-0", {"exit_code": 0})]
    assert job_outcome(ev).state == "finished"


def step(t, n, pid, ws=2, node="node-0"):
    return Event(t, "progress", "step", node, {"step": n, "pid": pid, "world_size": ws, "rank": 0})


def test_steps_a_gracefully_stopped_worker_finishes_after_the_fault_count_as_done():
    # SIGTERM at t=100: the old workers finish step 51 and save it; the new ones resume at 51
    ev = [step(99, 50, pid=1), Event(100, "fault", "injected", "node-1", {}), step(100.1, 51, pid=1),
          Event(100.2, "checkpoint", "saved", "node-1", {"step": 51}),
          Event(110, "checkpoint", "loaded", "node-0", {"step": 51}), step(111, 52, pid=2, ws=1)]
    rec = analyze_fault(ev, kind="spot-interruption", target="node-1", injected_at=100.0)
    assert rec.pre_step == 51 and rec.lost_steps == 0
    assert rec.regain_s == 11.0                    # the old worker's step 51 is not a regain


def test_steps_without_pids_count_as_restarted_once_the_agent_started_workers():
    ev = [Event(99, "progress", "step", "node-0", {"step": 50}), Event(100, "fault", "injected", "node-1", {}),
          Event(105, "agent", "workers_starting", "node-0", {}),
          Event(110, "progress", "step", "node-0", {"step": 41})]
    rec = analyze_fault(ev, kind="kill-node", target="node-1", injected_at=100.0)
    assert rec.recovery_s == 10.0 and rec.resumed_from_step == 40
