"""The rendezvous watcher against a real etcd on 127.0.0.1: every change is an event, the
store's absence and return are events, what cannot be decoded is an event, and the watcher
only ever reads."""
from __future__ import annotations

import os
import pickle
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import etcd as etcd_lib
import pytest
from rdzv_values import encode, torch_state

from elastic_chaos.events import Event, EventType, RdzvEv, Timeline
from elastic_chaos.host.etcd import EtcdServer
from elastic_chaos.watchers.rendezvous import KEY_PREFIX, RendezvousWatcher

RUN_ID = "watched"
KEY = f"{KEY_PREFIX}/{RUN_ID}"


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """A real etcd with the v2 API on 127.0.0.1, stopped by PID."""
    with EtcdServer(tmp_path / "etcd-data") as server:
        yield server


@pytest.fixture
def store(etcd: EtcdServer) -> etcd_lib.Client:
    """A python-etcd client of that etcd: the test's own writes."""
    return etcd_lib.Client(host="127.0.0.1", port=etcd.client_port)


@contextmanager
def watching(etcd: EtcdServer, wait_s: float = 0.5) -> Iterator[Timeline]:
    """A RendezvousWatcher on RUN_ID for the block; leaving it stops the thread (and raises its error)."""
    timeline = Timeline()
    with RendezvousWatcher(timeline, etcd.endpoint, RUN_ID, dict, wait_s=wait_s) as watcher:
        # writes made before its first read would be seen only as the value they left
        assert watcher.read_once.wait(15), "the watcher never read the key"
        yield timeline


def await_event(timeline: Timeline, type_: EventType, count: int = 1, timeout: float = 15.0) -> list[Event]:
    """Block until ``count`` events of ``type_`` are on the timeline; return them."""
    found = timeline.wait_for(lambda e: len(timeline.select(type_)) >= count, timeout)
    assert found is not None, f"{count} x {type_} not seen; timeline: {timeline.events()}"
    return timeline.select(type_)


def state(round_: int, complete: bool, pids: list[int], beat: float) -> str:
    return torch_state(round_, complete, [(p, r) for r, p in enumerate(pids)], [], {p: beat for p in pids})


def test_every_change_is_a_state_event_and_a_heartbeat_is_not(etcd, store):
    with watching(etcd) as timeline:
        t = time.time()
        for value in (state(0, False, [101], t), state(0, False, [101], t + 1),      # a heartbeat
                      state(0, True, [101, 202], t + 2), state(0, True, [101, 202], t + 3),
                      state(1, False, [101], t + 4)):
            store.write(KEY, value)
        states = await_event(timeline, RdzvEv.STATE, 3)
    assert [(s.data.round, s.data.complete) for s in states] == [(0, False), (0, True), (1, False)]
    assert [e.data.round for e in timeline.select(RdzvEv.ROUND_COMPLETE)] == [0]
    assert [p.id for p in states[1].data.participants] == ["10.0.0.1_101_0", "10.0.0.1_202_0"]


def test_a_rendezvous_formed_before_the_watch_is_read_at_once(etcd, store):
    store.write(KEY, state(3, True, [101], time.time()))
    with watching(etcd) as timeline:
        (seen,) = await_event(timeline, RdzvEv.STATE)
    assert seen.data.round == 3 and seen.data.num_nodes == 1


def test_a_deleted_key_is_an_event_and_the_next_rendezvous_is_seen(etcd, store):
    with watching(etcd) as timeline:
        store.write(KEY, state(0, True, [101], time.time()))
        await_event(timeline, RdzvEv.STATE)
        store.delete(KEY)
        await_event(timeline, RdzvEv.DELETED)
        store.write(KEY, state(1, True, [101], time.time()))
        await_event(timeline, RdzvEv.STATE, 2)


class _Exploit:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_of_a_foreign_class_is_refused_unrun_and_the_watch_goes_on(etcd, store, tmp_path):
    marker = tmp_path / "pwned"
    with watching(etcd) as timeline:
        store.write(KEY, encode(_Exploit(marker)))
        (refused,) = await_event(timeline, RdzvEv.REFUSED)
        store.write(KEY, state(0, True, [101], time.time()))
        await_event(timeline, RdzvEv.STATE)
    assert "system" in refused.data.reason and not marker.exists()


def test_a_value_that_is_no_state_is_undecodable_and_the_watch_goes_on(etcd, store):
    with watching(etcd) as timeline:
        store.write(KEY, "%%% not base64 %%%")
        store.write(KEY, encode({"round": 1}, protocol=pickle.HIGHEST_PROTOCOL))
        reasons = [e.data.reason for e in await_event(timeline, RdzvEv.UNDECODABLE, 2)]
        store.write(KEY, state(0, True, [101], time.time()))
        await_event(timeline, RdzvEv.STATE)
    assert "not base64" in reasons[0] and "not a state" in reasons[1]


def test_a_store_that_goes_away_is_one_event_and_its_return_another(etcd, store):
    with watching(etcd, wait_s=0.3) as timeline:
        store.write(KEY, state(0, True, [101], time.time()))
        await_event(timeline, RdzvEv.STATE)
        etcd.kill()
        (gone,) = await_event(timeline, RdzvEv.STORE_UNREACHABLE)
        time.sleep(1.5)                     # many failed polls later: still one event
        etcd.start()                        # same port, same data
        await_event(timeline, RdzvEv.STORE_REACHABLE)
        etcd_lib.Client(host="127.0.0.1", port=etcd.client_port).write(KEY, state(1, True, [101], time.time()))
        await_event(timeline, RdzvEv.STATE, 2)
    assert len(timeline.select(RdzvEv.STORE_UNREACHABLE)) == 1 and gone.data.error


def test_a_cleared_event_history_is_re_read_not_an_outage(etcd, store):
    with watching(etcd, wait_s=0.3) as timeline:
        store.write(KEY, state(0, True, [101], time.time()))
        await_event(timeline, RdzvEv.STATE)
        for i in range(1100):            # etcd keeps 1000 events: the watcher's index falls out
            store.write("/elsewhere", str(i))
        time.sleep(0.6)                  # at least one long poll ends and resumes meanwhile
        store.write(KEY, state(1, True, [101], time.time()))
        states = await_event(timeline, RdzvEv.STATE, 2)
    assert states[-1].data.round == 1
    assert timeline.select(RdzvEv.STORE_UNREACHABLE) == []


def store_requests(etcd: EtcdServer) -> float:
    """Reads and watch requests etcd has served so far (its own v2 store metrics)."""
    with urllib.request.urlopen(f"{etcd.url}/metrics", timeout=5) as resp:
        lines = resp.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines
               if line.startswith(("etcd_debugging_store_reads_total", "etcd_debugging_store_watch_requests_total")))


def test_a_cleared_event_history_does_not_make_the_watcher_spin(etcd, store):
    store.write(KEY, state(0, True, [101], time.time()))
    with watching(etcd, wait_s=0.3) as timeline:
        await_event(timeline, RdzvEv.STATE)
        for i in range(1100):
            store.write("/elsewhere", str(i))
        time.sleep(0.6)
        before = store_requests(etcd)
        time.sleep(2.0)                  # the rendezvous key does not change meanwhile
        served = store_requests(etcd) - before
    assert served < 30, f"{served:.0f} requests in 2 s: the watcher re-reads in a loop instead of long-polling"


def test_stopping_is_prompt_during_a_long_poll(etcd):
    timeline = Timeline()
    watcher = RendezvousWatcher(timeline, etcd.endpoint, RUN_ID, dict, wait_s=1.0)
    watcher.start()
    time.sleep(1.5)                      # the key does not exist: the watcher long-polls for it
    began = time.monotonic()
    watcher.stop()
    assert time.monotonic() - began < 3.0   # at most the pending poll and one last look
    assert timeline.events() == []


def test_the_watcher_only_reads(etcd, store):
    before = store.read("/").etcd_index
    with watching(etcd, wait_s=0.3) as timeline:
        store.write(KEY, state(0, True, [101], time.time()))
        await_event(timeline, RdzvEv.STATE)
        store.delete(KEY)
        await_event(timeline, RdzvEv.DELETED)
        time.sleep(1.0)
    assert store.read("/").etcd_index == before + 2, "only the test's two writes may have changed etcd"
