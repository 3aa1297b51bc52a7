"""Processes in pods count their PIDs from 1 in their own namespace: a re-created pod's worker
often has its predecessor's PID, and two pods' rank 0 may share one. The analysis tells
processes apart by their node and their own start, not by PID alone."""
from __future__ import annotations

from chaos.analysis.invariants import split_brains
from chaos.analysis.recovery import analyze_fault
from chaos.events import CheckpointEv, Event, ProgressEv


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
    rec = analyze_fault(ev, kind="kill-node", target="w-1", injected_at=f)
    assert rec.pre_step == 50 and rec.resumed_from_step == 40 and rec.lost_steps == 10
    assert rec.recovery_s == 22.0 and rec.regain_s is not None and abs(rec.regain_s - 23.0) < 1e-6


def test_two_pods_training_at_once_as_rank_0_with_the_same_pid_are_a_split_brain():
    ev = [step(10.0 + i, "w-0", 9, i, ws=1) for i in range(10)]
    ev += [step(12.0 + i, "w-1", 9, i, ws=1) for i in range(10)]
    (brain,) = split_brains(ev)
    assert {w[0] for w in brain.worlds} == {"w-0", "w-1"}
