"""Split brain: two worlds of one job training at the same time."""
from __future__ import annotations

from elastic_chaos.analysis.invariants import split_brains
from elastic_chaos.events import Event, ProgressEv, payload_json


def steps(pid: int, node: str, start: float, end: float, ws: int = 1, every: float = 0.5) -> list[Event]:
    out, t, n = [], start, 0
    while t <= end:
        n += 1
        out.append(Event.make(ProgressEv.STEP, t, node, {"step": n, "rank": 0, "pid": pid, "world_size": ws}))
        t += every
    return out


def test_two_rank_zeros_training_together_are_a_split_brain():
    ev = steps(1, "node-0", 0, 60) + steps(2, "node-2", 20, 60)
    (brain,) = split_brains(ev)
    assert (brain.start, brain.end) == (20, 60)
    assert "pid 1 on node-0" in brain.describe() and "pid 2 on node-2" in brain.describe()


def test_generations_that_follow_each_other_are_not():
    assert split_brains(steps(1, "node-0", 0, 30) + steps(2, "node-0", 40, 70)) == []


def test_a_graceful_hand_over_is_not():
    # the old worker finishes its last step just after the new one started
    assert split_brains(steps(1, "node-0", 0, 30.5) + steps(2, "node-1", 29, 60)) == []


def test_other_ranks_do_not_count():
    ev = steps(1, "node-0", 0, 60)
    ev += [Event.make(e.type, e.t, "node-1", {**payload_json(e.data), "rank": 1, "pid": 3}) for e in ev]
    assert split_brains(ev) == []
