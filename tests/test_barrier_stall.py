"""A participant lost between a round's close and its agents' rank exchange leaves the others
stuck (elastic_chaos.analysis.barrier), and only then: hand-built timelines shaped like the
replay run that hit it in the catalog (round 4 closed, node-2 killed 0.02 s later)."""
from __future__ import annotations

import pytest

from elastic_chaos.analysis.barrier import stalls
from elastic_chaos.events import AgentEv, Event, NodeEv, RdzvEv

CLOSE = 100.0


def closed(t: float, rnd: int, *nodes: str) -> Event:
    return Event.make(RdzvEv.ROUND_COMPLETE, t, None, {
        "round": rnd, "complete": True,
        "participants": [{"node": n, "id": f"127.0.0.1_{i}_0", "rank": i} for i, n in enumerate(nodes)]})


def finished(t: float, node: str) -> Event:
    return Event.make(AgentEv.RENDEZVOUS_COMPLETE, t, node, {})


def lost(t: float, node: str) -> Event:
    return Event.make(NodeEv.LOST, t, node, {"action": "sigkill-all"})


def test_a_participant_lost_before_the_rank_exchange_names_the_stuck_survivor():
    (stall,) = stalls([closed(CLOSE, 4, "node-2", "node-3"), lost(CLOSE + 0.02, "node-2")])
    assert (stall.round, stall.lost, stall.waiting) == (4, "node-2", ("node-3",))
    assert stall.lost_after_s == pytest.approx(0.02)
    assert "node-3 is stuck in round 4's rank exchange" in stall.describe()
    assert "300s" in stall.describe()


def test_a_loss_after_the_agents_finished_the_round_is_an_ordinary_loss():
    events = [closed(CLOSE, 4, "node-2", "node-3"), finished(CLOSE + 0.6, "node-2"),
              finished(CLOSE + 0.6, "node-3"), lost(CLOSE + 5.0, "node-2")]
    assert stalls(events) == []


def test_a_survivor_that_finished_is_not_stuck_even_if_the_lost_node_never_did():
    # rank 0 finished (it had every role info) and was lost before rank 1 logged its own finish:
    # rank 1 had what it needed, only its log line was late
    events = [closed(CLOSE, 4, "node-2", "node-3"), finished(CLOSE + 0.5, "node-3"), lost(CLOSE + 0.1, "node-2")]
    assert stalls(events) == []


def test_a_survivor_that_finished_a_later_round_was_not_stuck():
    # it re-formed with a new node in round 5: whatever kept its round-4 line from the log, it moved on
    events = [closed(CLOSE, 4, "node-2", "node-3"), lost(CLOSE + 0.02, "node-2"),
              closed(CLOSE + 10, 5, "node-3", "node-4"), finished(CLOSE + 10.5, "node-3"),
              finished(CLOSE + 10.5, "node-4")]
    assert stalls(events) == []
    assert [s.round for s in stalls(events, until=CLOSE + 5)] == [4]   # as seen 5 s after the close


def test_everyone_lost_leaves_nobody_waiting():
    events = [closed(CLOSE, 4, "node-2", "node-3"), lost(CLOSE + 0.02, "node-2"), lost(CLOSE + 0.03, "node-3")]
    assert stalls(events) == []
