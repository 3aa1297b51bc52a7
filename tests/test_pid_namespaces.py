"""Processes in pods count their PIDs from 1 in their own namespace: a re-created pod's worker
often has its predecessor's PID, and two pods' rank 0 may share one. The analysis tells
processes apart by their node and their own start, not by PID alone."""
from __future__ import annotations

from elastic_chaos.analysis.invariants import split_brains
from elastic_chaos.analysis.recovery_analysis import analyze_fault
from elastic_chaos.events import CheckpointEv, Event, ProgressEv


def step(t: float, node: str, pid: int, n: int, ws: int = 2, rank: int = 0) -> Event:
    return Event.make(ProgressEv.STEP, t, node, {"step": n, "pid": pid, "rank": rank, "world_size": ws})


def start(t: float, node: str, pid: int) -> Event:
    return Event.make(ProgressEv.START, t, node, {"pid": pid, "rank": 0})


def test_a_replacement_pods_worker_with_its_predecessors_pid_counts_as_restarted():
    f = 100.0
    ev = [start(0.0, "w-0", 9), start(0.0, "w-1", 9)]
    ev += [step(90.0 + i * 0.1, "w-0", 9, 41 + i) for i in range(10)]          # steps 41..50 before the fault
    ev += [start(120.0, "w-0", 9),                                               # w-0's new worker: pid 9 again
           Event.make(CheckpointEv.LOADED, 121.0, "w-0", {"step": 40, "pid": 9})]
    ev += [step(122.0 + i * 0.1, "w-0", 9, 41 + i, ws=1) for i in range(15)]   # 41..55 again, then past 50
    rec = analyze_fault(ev, fault="kill-node", target="w-1", injected_at=f)
    assert rec.pre_step == 50 and rec.resumed_from_step == 40 and rec.lost_steps == 10
    assert rec.recovery_s == 22.0 and rec.regain_s is not None and abs(rec.regain_s - 23.0) < 1e-6


def test_two_pods_training_at_once_as_rank_0_with_the_same_pid_are_a_split_brain():
    ev = [step(10.0 + i, "w-0", 9, i, ws=1) for i in range(10)]
    ev += [step(12.0 + i, "w-1", 9, i, ws=1) for i in range(10)]
    (brain,) = split_brains(ev)
    assert {w[0] for w in brain.worlds} == {"w-0", "w-1"}


def test_a_re_created_pods_worker_with_its_predecessors_pid_is_not_its_predecessor():
    # measured on the local cluster: worker-1 (rank 0, pid 9) lost at 20 s; worker-0 trained alone
    # 65-74 s; worker-1's replacement pod started its worker as pid 9 again and trained from 80 s.
    # One span for both lives of pid 9 covered 15-81 s and read as a 9 s split brain.
    ev = [start(15.0, "w-0", 10), start(15.0, "w-1", 9)]
    ev += [step(15.6 + i * 0.1, "w-1", 9, i) for i in range(50)]
    ev += [start(65.0, "w-0", 17)] + [step(65.4 + i * 0.1, "w-0", 17, 41 + i, ws=1) for i in range(90)]
    ev += [start(78.4, "w-1", 9)] + [step(80.9 + i * 0.1, "w-1", 9, 133 + i) for i in range(6)]
    assert split_brains(ev) == []


def test_two_lives_of_a_pid_still_show_a_split_brain_with_a_third_process():
    ev = [start(0.0, "w-1", 9)] + [step(1.0 + i, "w-1", 9, i) for i in range(5)]
    ev += [start(20.0, "w-1", 9)] + [step(21.0 + i, "w-1", 9, i, ws=1) for i in range(10)]
    ev += [step(23.0 + i, "w-0", 17, i, ws=1) for i in range(10)]
    (brain,) = split_brains(ev)
    assert {w[0] for w in brain.worlds} == {"w-0", "w-1"} and brain.start == 23.0
