"""Steady state before the method: an unsteady job gets no fault (elastic_chaos.analysis.steady)."""
from __future__ import annotations

from elastic_chaos.analysis.steady import restarts_before, unsteady
from elastic_chaos.analysis.verdict import Outcome, Verdict
from elastic_chaos.events import AgentEv, CheckpointEv, Event, ProgressEv


def step(t: float, n: int, ws: int = 2, node: str = "node-0") -> Event:
    return Event.make(ProgressEv.STEP, t, node, {"step": n, "world_size": ws, "rank": 0})


def test_a_job_training_at_its_size_with_saves_and_no_failure_is_steady():
    ev = [step(1, 10), Event.make(CheckpointEv.SAVED, 2, "node-0", {"step": 20}), step(3, 30)]
    assert unsteady(ev, world_size=2, checkpoint_every=20) == []


def test_a_restart_to_admit_a_late_node_is_formation_not_a_failure():
    ev = [step(1, 1, ws=1), Event.make(AgentEv.MEMBERSHIP_CHANGE, 2, "node-0", {"new_nodes": 1}),
          Event.make(AgentEv.WORKERS_STOPPING, 2.1, "node-0"), step(3, 2, ws=2)]
    assert unsteady(ev, world_size=2) == []


def test_failures_in_warm_up_make_the_job_unsteady_and_count_the_restarts_spent():
    ev = [step(1, 1), Event.make(AgentEv.WORKER_FAILED, 2, "node-1", {"exitcode": 1, "local_rank": 0}),
          Event.make(AgentEv.WORKER_GROUP_FAILED, 2.1, "node-1", {"attempts_left": 2, "max_restarts": 3}),
          Event.make(AgentEv.WORKER_GROUP_FAILED, 4, "node-1", {"attempts_left": 1, "max_restarts": 3}),
          step(5, 3)]
    (problem,) = unsteady(ev, world_size=2)
    assert "failed before the fault" in problem.what and "2 restart(s) of its budget spent" in problem.what
    assert {e.node for e in problem.evidence} == {"node-1"}
    assert restarts_before(ev, until=5) == 2


def test_a_job_at_another_size_than_it_was_started_with_is_unsteady():
    (problem,) = unsteady([step(1, 5, ws=1)], world_size=2)
    assert "world size 1, not the 2" in problem.what


def test_a_bound_on_lost_steps_needs_a_checkpoint_where_saves_can_be_seen():
    ev = [step(1, 45)]
    (problem,) = unsteady(ev, world_size=2, checkpoint_every=20)
    assert "no checkpoint was saved by step 45" in problem.what
    assert unsteady(ev, world_size=2, checkpoint_every=20, sees_saves=False) == []
    assert unsteady(ev, world_size=2, checkpoint_every=50) == []
    # one interval in, the save due at step 20 may still be being written: not yet a problem
    assert unsteady([step(1, 25)], world_size=2, checkpoint_every=20) == []


def test_a_failed_steady_state_is_its_own_outcome_and_exit_code():
    v = Verdict()
    v.fail("the job was not steady", check="steady-state")
    assert v.outcome is Outcome.NOT_STEADY and v.outcome.exit_code == 3
    v.fail("a watcher died", check="watcher")
    assert v.outcome is Outcome.TOOLKIT_ERROR and v.outcome.exit_code == 4


def test_a_save_stamped_after_the_latest_step_still_shows_the_job_saves():
    """Seen with the DDP tutorial's shape on CPU (an epoch of 0.1 s): the watcher reports a file's save
    with its mtime a poll or two late, after steps logged later; the job was called unsteady."""
    ev = [step(1, 5), step(1.1, 9), step(1.2, 11), Event.make(CheckpointEv.SAVED, 1.15, "node-0", {"step": 9})]
    ev.sort(key=lambda e: e.t)
    late = [step(1, 5), step(1.1, 9), step(1.2, 11), Event.make(CheckpointEv.SAVED, 1.4, "node-0", {"step": 9})]
    assert unsteady(ev, world_size=2, checkpoint_every=3) == []
    assert unsteady(late, world_size=2, checkpoint_every=3) == []


def test_a_later_faults_restarts_before_it_are_the_earlier_faults_recoveries_not_warm_up():
    """Seen in kill-at-save-point (one fault per save point, in one run): every fault after the first
    said its job 'was not steady' because of the previous fault's restart."""
    from elastic_chaos.analysis.recovery_analysis import analyze
    from elastic_chaos.events import FaultEv

    def kill(t: float, node: str) -> Event:
        return Event.make(FaultEv.INJECTED, t, node, {"fault": "kill-node"})
    ev = [step(1, 1), step(2, 2), kill(3, "node-1"),
          Event.make(AgentEv.WORKER_GROUP_FAILED, 3.5, "node-0", {"attempts_left": 2, "max_restarts": 3}),
          step(5, 3), step(6, 4), kill(7, "node-2"), step(9, 5)]
    first_rec, second = analyze(ev)
    assert first_rec.restarts_before == 0 and second.restarts_before == 0
    assert not [n for n in second.notes if "warm-up" in n]
    warm = [ev[0], Event.make(AgentEv.WORKER_GROUP_FAILED, 1.5, "node-0", {"attempts_left": 2, "max_restarts": 3}),
            *ev[1:]]
    assert [r.restarts_before for r in analyze(warm)] == [1, 1]


def test_a_checkpoint_file_rewritten_faster_than_a_poll_is_named_as_such_not_as_nothing_written():
    ev = [step(1, 10), step(2, 39)]
    (problem,) = unsteady(ev, world_size=2, checkpoint_every=2, watched="checkpoints/last.pt",
                          workdir_holds=["last.pt"], unsettled=17, poll_s=0.2)
    assert "rewritten 17 times by step 39 without once holding still for one poll (0.2 s)" in problem.what
    assert "save less often (every 0.4 s at the least)" in problem.what and "nothing was written" not in problem.what
    (quiet,) = unsteady(ev, world_size=2, checkpoint_every=2, watched="checkpoints/last.pt", workdir_holds=[])
    assert "nothing was written at the --checkpoint path" in quiet.what
