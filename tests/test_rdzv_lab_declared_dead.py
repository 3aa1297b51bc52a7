"""torch's own _sanitize, reported: a participant whose heartbeat expired is declared dead whether its round
completed or is still forming (bench.rdzv.hollow.report_declared_dead). The state comes from an in-memory
backend standing in for the store (a real store: test_rdzv_lab_harness.py); the holder and its _sanitize are
torch's."""
from __future__ import annotations

import pickle
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    RendezvousSettings,
    RendezvousTimeout,
    _BackendRendezvousStateHolder,
    _NodeDesc,
    _RendezvousState,
)

from bench.rdzv.hollow import Counts, node_addr, report_declared_dead


class MemoryBackend:
    name = "memory"

    def __init__(self, state: _RendezvousState) -> None:
        self.bits = pickle.dumps(state)

    def get_state(self) -> tuple[bytes, Any]:
        return self.bits, 1

    def set_state(self, state: bytes, token: Any = None) -> tuple[bytes, Any, bool]:
        self.bits = state
        return state, 2, True


def holder_with(complete: bool) -> tuple[Any, list[dict[str, Any]]]:
    now = datetime.now(timezone.utc)
    live, silent = (_NodeDesc(node_addr(i), 1, 0) for i in (0, 1))
    state = _RendezvousState()
    state.round, state.complete = 3, complete
    state.participants = {live: 0, silent: 1}
    state.last_heartbeats = {live: now, silent: now - timedelta(seconds=10)}  # expiry: 1 s x 4 below
    settings = RendezvousSettings("run", 2, 3, RendezvousTimeout(), timedelta(seconds=1), 4)
    holder = _BackendRendezvousStateHolder(MemoryBackend(state), settings, cache_duration=0)
    said: list[dict[str, Any]] = []
    report_declared_dead(SimpleNamespace(_state_holder=holder), 0, Counts(),  # type: ignore[arg-type]
                         lambda ev, index, **kw: said.append({"ev": ev, **kw}))
    return holder, said


def test_a_silent_participant_of_a_forming_round_is_declared_dead_and_said_to_be_forming():
    holder, said = holder_with(complete=False)
    holder.sync()
    holder.sync()  # seen again: reported once
    assert [(d["node"], d["round"], d["forming"]) for d in said] == [(1, 3, True)]
    assert said[0]["heartbeat_age_s"] >= 10.0
    assert [n.addr for n in holder.state.participants] == [node_addr(0)]  # torch's decision, untouched


def test_one_of_a_completed_round_is_declared_dead_as_before():
    holder, said = holder_with(complete=True)
    holder.sync()
    assert [(d["node"], d["forming"]) for d in said] == [(1, False)]
