"""Replaying a real job in the rendezvous lab's harness: the real survivors' restart offsets, read from the
agents' own log lines (bench.local_nodes.rendezvous_figures), and the harness failing each survivor's workers at
its offset (bench.rdzv.episodes.Sizer._fail_times). Hand-built timelines; a stand-in object for the harness
where only its job's numbers are read (no process is started here: tests/test_rdzv_lab_harness.py runs the
real one)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.local_nodes import rendezvous_figures
from bench.rdzv.episodes import Sizer
from bench.rdzv.harness import Harness, ScaleJob
from elastic_chaos.events import AgentEv, Event
from elastic_chaos.spec import RdzvBackend

KILL = 100.0


def started(t: float, node: str) -> Event:
    return Event.make(AgentEv.RENDEZVOUS_STARTED, t, node, {})


def complete(t: float, node: str, world: int) -> Event:
    return Event.make(AgentEv.RENDEZVOUS_COMPLETE, t, node, {"group_world_size": world})


def real_three_node_job() -> list[Event]:
    return [started(90.0, "node-0"), started(90.4, "node-1"), started(91.0, "node-2"),
            *(complete(92.0, n, 3) for n in ("node-0", "node-1", "node-2")),
            started(KILL + 0.62, "node-1"), started(KILL + 0.51, "node-0"),
            complete(KILL + 5.3, "node-0", 2), complete(KILL + 5.31, "node-1", 2)]


def test_the_survivors_restart_offsets_are_read_from_their_agents():
    figs = rendezvous_figures(real_three_node_job(), 3, KILL, "node-2")
    assert figs.offsets_s == (0.0, 0.4, 1.0)
    assert figs.formation_s == 1.0 and figs.reformation_s == 5.31
    assert figs.restarts_s == (0.51, 0.62)


def test_a_survivor_that_never_restarted_leaves_no_offsets_to_replay():
    events = [e for e in real_three_node_job() if not (e.node == "node-1" and e.t > KILL)]
    assert rendezvous_figures(events, 3, KILL, "node-2").restarts_s is None


def sizer(restarts: list[float] | None) -> Sizer:
    job = ScaleJob(RdzvBackend.ETCD_V2, 3, 2, 3, monitor_interval=0.1)
    return Sizer(SimpleNamespace(job=job), lambda _: None, steady_s=0, restarts=restarts)  # type: ignore[arg-type]


def test_survivors_fail_at_once_without_a_real_job_to_replay():
    assert sizer(None)._fail_times([0, 1], 50.0) == {50.0: [0, 1]}


def test_each_survivor_fails_at_its_replayed_offset_less_half_a_check():
    times = sizer([0.62, 0.51])._fail_times([0, 1], 50.0)
    assert sorted((round(t - 50.0, 3), ids) for t, ids in times.items()) == [(0.46, [0]), (0.57, [1])]
    assert sizer([0.01, 0.0])._fail_times([0, 1], 50.0) == {50.0: [0, 1]}  # never before the loss


def test_offsets_for_another_number_of_survivors_are_refused():
    with pytest.raises(ValueError, match="2 restart offsets for 3 survivors"):
        sizer([0.5, 0.6])._fail_times([0, 1, 2], 50.0)


def harness_that_saw(*events: dict) -> Harness:
    h = Harness(ScaleJob(RdzvBackend.C10D, 3, 2, 3), Path("/nonexistent"))  # not entered: nothing started
    h.events.extend(events)
    return h


def ev(kind: str, by: int, t: float, **data) -> dict:
    return {"ev": kind, "id": by, "t": t, **data}


def test_only_a_live_node_that_never_completed_its_round_counts_as_a_false_death():
    h = harness_that_saw(
        *(ev("formed", n, 10.0, round=4) for n in (0, 1)),
        ev("rdzv_started", 1, 12.0),  # node 1 formed round 4, then left it to re-form: heartbeats stopped
        ev("declared_dead", 0, 17.0, round=4, node=1, heartbeat_age_s=4.5),
        ev("declared_dead", 1, 17.5, round=4, node=2, heartbeat_age_s=4.2),  # node 2 never got round 4
        ev("declared_dead", 2, 17.6, round=4, node=0, heartbeat_age_s=5.0),  # node 0 was killed
        ev("declared_dead", 0, 17.7, round=4, node=2, heartbeat_age_s=4.3),  # seen twice, reported once
        ev("declared_dead", 0, 17.8, round=5, node=3, heartbeat_age_s=4.1),
        ev("formed", 3, 18.0, round=5))  # node 3 read as expired by one node, formed round 5 all the same
    assert [(d["node"], d["heartbeat_age_s"]) for d in h.false_deaths(0.0, gone={0})] == [(2, 4.2)]
    assert h.false_deaths(17.75, gone={0}) == []  # declared before the episode began


def test_a_node_address_reads_back_as_its_index():
    from bench.rdzv.hollow import node_addr, node_index

    assert [node_index(node_addr(i)) for i in (0, 1, 255, 256, 70_000)] == [0, 1, 255, 256, 70_000]
