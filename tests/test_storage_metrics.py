"""The storage metric group and its advice, from made-up timelines: saves as the job timed them,
failed and interrupted saves by errno, time stalled on storage, and the last save of a node told
to go against its grace period."""
from __future__ import annotations

from elastic_chaos.analysis.advice.storage import storage_findings
from elastic_chaos.analysis.groups import FaultMark
from elastic_chaos.analysis.recovery import Recovery
from elastic_chaos.analysis.result import FaultResult
from elastic_chaos.analysis.storage import STORAGE, StorageCost, grace_sentence, job_saves, measure_storage
from elastic_chaos.events import CheckpointEv, Event, NodeEv, ProgressEv
from elastic_chaos.events.records import FaultRecord

LAYER = Event.make(CheckpointEv.STORAGE_LAYER, 0.0, None, {"mountpoint": "/ckpt"})


def save(node: str, step: int, start: float, end: float | None, *, rank: int = 0, reason: str = "periodic"
         ) -> list[Event]:
    out = [Event.make(CheckpointEv.STARTED, start, node, {"step": step, "rank": rank, "reason": reason})]
    if end is not None:
        out.append(Event.make(CheckpointEv.SAVED, end, node, {"step": step, "rank": rank, "reason": reason}))
    return out


def volume(node: str, start: float, end: float, *, error: str | None = None, stalled: float = 0.0) -> Event:
    return Event.make(CheckpointEv.STORAGE_SAVE, end, node, {"path": ".ckpt.tmp", "started_at": start,
                                                             "duration_s": end - start, "error": error,
                                                             "stalled_s": stalled})


def test_saves_before_and_in_the_window_are_timed_as_the_job_timed_them():
    events = [LAYER, *save("n0", 10, 1.0, 1.1), *save("n0", 20, 3.0, 3.3),     # before the fault at 5
              *save("n0", 30, 6.0, 8.0), *save("n0", 40, 9.0, 13.0), *save("n0", 50, 14.0, 15.0)]
    cost = measure_storage(events, FaultMark("slow-storage", None, 5.0))
    assert cost is not None and cost.saves == 3
    assert abs(cost.save_before_s - 0.1) < 1e-9 and (cost.save_p50_s, cost.save_max_s) == (2.0, 4.0)
    assert cost.grace_s is None and cost.saved_in_time is None      # nobody was told to go


def test_the_volumes_timing_stands_in_for_a_script_that_reports_no_saves():
    saves = job_saves([LAYER, volume("n0", 1.0, 1.5), volume("n0", 2.0, 2.1, error="EIO")])
    assert [(s.start, s.end, s.error) for s in saves] == [(1.0, 1.5, None), (2.0, None, "EIO")]


def test_failed_saves_are_counted_by_errno_and_a_killed_writers_save_apart():
    events = [LAYER, *save("n0", 20, 6.0, None), volume("n0", 6.0, 6.1, error="ENOSPC"),
              volume("n0", 7.0, 7.5, error="ENOSPC", stalled=0.4), volume("n1", 8.0, 9.0, error="EINTR"),
              Event.make(CheckpointEv.STORAGE_STALL, 8.5, "n1", {"op": "opendir", "stalled_s": 1.5})]
    cost = measure_storage(events, FaultMark("storage-full", None, 5.0))
    assert cost is not None and (cost.failed_saves, cost.interrupted_saves) == (2, 1)
    assert cost.errors == {"ENOSPC": 2, "EINTR": 1}
    assert abs((cost.stalled_s or 0) - 1.9) < 1e-9


def told_to_go(grace: float = 10.0) -> list[Event]:
    return [Event.make(NodeEv.NOTICE, 4.0, "n1", {"notice": "interruption"}),
            Event.make(NodeEv.LOST, 5.0, "n1", {"action": "sigterm-then-sigkill", "grace_s": grace})]


def test_a_save_that_ends_inside_the_grace_period_says_how_much_was_left():
    events = [LAYER, *told_to_go(), *save("n1", 40, 5.5, 9.0, reason="sigterm")]
    cost = measure_storage(events, FaultMark("spot-interruption", "n1", 5.0, {"grace_s": 10.0}))
    assert cost is not None and cost.saved_in_time is True
    assert (cost.grace_s, cost.last_save_s, cost.grace_left_s) == (10.0, 3.5, 6.0)
    assert "6.0s of its 10.0s grace period to spare" in grace_sentence(cost)


def test_a_save_the_sigkill_cut_off_never_ended_and_did_not_make_it():
    events = [LAYER, *told_to_go(), *save("n1", 40, 6.0, None, reason="sigterm"),
              volume("n1", 6.0, 15.0, error="EINTR"), Event.make(ProgressEv.STEP, 20.0, "n0", {"step": 41})]
    cost = measure_storage(events, FaultMark("spot-interruption", "n1", 5.0))
    assert cost is not None and cost.saved_in_time is False and cost.grace_left_s is None
    assert cost.last_save_s == 9.0                                   # from its start to the SIGKILL
    assert any("the SIGKILL came first" in m for m in cost.missing)


def test_a_node_whose_workers_were_held_began_no_save_and_says_so():
    events = [LAYER, Event.make(ProgressEv.STEP, 1.0, "n1", {"step": 30}), *told_to_go()]
    cost = measure_storage(events, FaultMark("spot-interruption", "n1", 5.0))
    assert cost is not None and cost.saved_in_time is False and cost.last_save_s is None
    assert any("last training step came 4.0s before its SIGTERM" in m for m in cost.missing)


def test_a_run_without_the_storage_layer_has_no_storage_metrics():
    assert measure_storage(save("n0", 10, 1.0, 1.1), FaultMark("kill-node", "n0", 0.5)) is None


def test_the_group_reads_back_what_it_wrote():
    events = [LAYER, *told_to_go(), *save("n1", 40, 5.5, 9.0, reason="sigterm"), volume("n0", 6.0, 6.2, error="EIO")]
    cost = measure_storage(events, FaultMark("spot-interruption", "n1", 5.0))
    assert cost is not None
    back = StorageCost.from_json("n1", 5.0, cost.to_json())
    assert back.to_json() == cost.to_json() and STORAGE.key == "storage"


def result(cost: StorageCost, restarts: int = 0) -> FaultResult:
    rec = Recovery(fault="spot-interruption", target="n1", injected_at=5.0, restarts_used=restarts)
    return FaultResult(FaultRecord("spot-interruption", "n1", 5.0), {"recovery": rec, "storage": cost})


def test_advice_names_the_gap_between_a_save_and_the_grace_period():
    cost = StorageCost("n1", 5.0, grace_s=30.0, last_save_s=41.0, saved_in_time=False, save_before_s=0.5,
                       save_max_s=41.0, save_p50_s=20.0, stalled_s=60.0)
    texts = [f.text for f in storage_findings(0, result(cost))]
    assert any("save took 41 s on slow storage; the grace period is 30 s" in t and "terminationGracePeriodSeconds"
               in t and "save asynchronously" in t for t in texts), texts
    assert any("saves took up to 41.0 s" in t for t in texts), texts


def test_no_advice_for_a_save_that_left_most_of_its_grace_period():
    cost = StorageCost("n1", 5.0, grace_s=30.0, last_save_s=2.0, grace_left_s=25.0, saved_in_time=True,
                       save_before_s=1.0, save_max_s=2.0)
    assert storage_findings(0, result(cost)) == []


def test_advice_for_failed_saves_counts_the_restarts_they_cost():
    cost = StorageCost("n1", 5.0, failed_saves=2, errors={"ENOSPC": 2})
    [finding] = storage_findings(0, result(cost, restarts=2))
    assert "2 save(s) failed on the volume (ENOSPC x2) and the job restarted 2 time(s)" in finding.text


def test_advice_for_a_node_that_could_not_even_begin_its_save():
    cost = StorageCost("n1", 5.0, grace_s=5.0, saved_in_time=False, save_max_s=10.1,
                       missing=["n1 began no save between its notice and the end of its grace period (its last "
                                "training step came 2.1s before its SIGTERM: its workers were held)"])
    [finding] = storage_findings(0, result(cost))
    assert finding.text.startswith("n1 began no save in its 5 s grace period (its last training step came 2.1s")
    assert "the job's saves took up to 10 s meanwhile" in finding.text
