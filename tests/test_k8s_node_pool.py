"""The Kubernetes platform's node pool and pod view, without a cluster.

The machines' owner is played by a recording stand-in (the real ones need a
cluster: the local cluster is root's namespaces, kind is Docker); the pod
view is fed pod objects as the watch delivers them; the spot-notice stand-in
is a real server on loopback, polled by the trainer's own IMDS client.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from elastic_chaos.analysis.recovery_analysis import analyze_fault
from elastic_chaos.errors import FaultUnavailable
from elastic_chaos.events import Event, NodeEv, RdzvEv, Timeline, payload_json
from elastic_chaos.platforms.api import NodeState
from elastic_chaos.platforms.kubernetes.machines import LocalClusterMachines, MachineOp, Machines, NoMachines
from elastic_chaos.platforms.kubernetes.notices import NoticeServer
from elastic_chaos.platforms.kubernetes.pods import PodTracker
from elastic_chaos.platforms.kubernetes.pool import MachinePool
from elastic_chaos.platforms.kubernetes.statefulset import final_exit
from elastic_chaos.trainer.spot_notice import SpotNoticeWatcher


class RecordingMachines(Machines):
    """Adds machines named m-1, m-2, ... and records every call."""

    name = "recorded"

    def __init__(self, add_s: float = 0.0) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.add_s = add_s

    def unavailable(self, op: MachineOp) -> str | None:
        return None

    def _lose(self, machine: str, once_dead) -> float:
        self.calls.append(("lose", machine))
        if once_dead is not None:
            once_dead()
        return time.time()

    def _add(self) -> str:
        time.sleep(self.add_s)
        name = f"m-{sum(1 for c in self.calls if c[0] == 'add') + 1}"
        self.calls.append(("add", name))
        return name


@pytest.fixture
def timeline(tmp_path: Path):
    tl = Timeline(tmp_path / "timeline.jsonl")
    yield tl
    tl.close()


def test_a_lost_machine_is_replaced_after_the_provisioning_delay(timeline: Timeline):
    machines = RecordingMachines()
    pool = MachinePool(machines, timeline, replace=True, delay_s=0.3)
    began = time.time()
    assert pool.lost("m-0", "job-worker-1") and pool.pending()
    deadline = time.monotonic() + 5
    while pool.pending() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert machines.calls == [("add", "m-1")] and pool.added == ["m-1"]
    asked = timeline.select(NodeEv.PROVISIONING)[0]
    made = timeline.select(NodeEv.PROVISIONED)[0]
    assert payload_json(asked.data) == {"replaces": "job-worker-1", "machine": "m-0", "delay_s": 0.3}
    assert payload_json(made.data) == {"replaces": "job-worker-1", "machine": "m-1"} and made.t - began >= 0.3


def test_a_pool_that_replaces_nothing_asks_for_nothing(timeline: Timeline):
    machines = RecordingMachines()
    pool = MachinePool(machines, timeline, replace=False, delay_s=0.0)
    assert not pool.lost("m-0", "job-worker-1")
    assert machines.calls == [] and not timeline.select(NodeEv.PROVISIONING)


def test_stopping_the_pool_cancels_a_replacement_still_waiting_out_its_delay(timeline: Timeline):
    machines = RecordingMachines()
    pool = MachinePool(machines, timeline, replace=True, delay_s=30.0)
    pool.lost("m-0", "job-worker-1")
    started = time.monotonic()
    pool.stop()
    assert time.monotonic() - started < 2 and machines.calls == [] and not pool.pending()


def test_machines_nobody_operates_say_why_every_operation_is_unavailable():
    for op in MachineOp:
        assert "owner" in (NoMachines().unavailable(op) or "")
    with pytest.raises(FaultUnavailable):
        NoMachines().lose("ec-node-2")


def test_the_local_clusters_machines_need_it_running(tmp_path: Path):
    reason = LocalClusterMachines(tmp_path).unavailable(MachineOp.LOSE) or ""
    assert "not running" in reason or "root" in reason


# -- the pod view -----------------------------------------------------------------------------
def pod(name: str, uid: str, *, phase: str = "Running", ip: str = "10.88.2.3", machine: str = "ec-node-2",
        state: dict | None = None, last: dict | None = None, restarts: int = 0, deleting: bool = False) -> dict:
    status = {"name": "worker", "restartCount": restarts, "state": state or {"running": {}}}
    if last:
        status["lastState"] = last
    meta = {"name": name, "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": machine},
            "status": {"phase": phase, "podIP": ip, "containerStatuses": [status]}}


def test_the_pod_ip_names_the_node_in_the_rendezvous(timeline: Timeline):
    tracker = PodTracker(timeline)
    tracker.on_event("ADDED", pod("w-0", "u1"))
    info = tracker.get("w-0")
    assert info is not None and info.labels["address"] == "10.88.2.3" and info.labels["machine"] == "ec-node-2"


def test_an_agent_that_exits_for_good_ends_its_node_though_the_pod_runs_on(timeline: Timeline):
    tracker = PodTracker(timeline, final_exit=final_exit)
    tracker.on_event("ADDED", pod("w-0", "u1"))
    tracker.on_event("MODIFIED", pod("w-0", "u1", restarts=1, last={"terminated": {"exitCode": 1}}))
    info = tracker.get("w-0")
    assert info is not None and info.state is NodeState.EXITED and info.exit_code == 1
    assert [e.data.exit_code for e in timeline.select(NodeEv.EXITED)] == [1]
    assert not timeline.select(NodeEv.RESTARTED)


def test_an_agent_killed_by_a_signal_restarts_in_place(timeline: Timeline):
    tracker = PodTracker(timeline, final_exit=final_exit)
    tracker.on_event("ADDED", pod("w-0", "u1"))
    tracker.on_event("MODIFIED", pod("w-0", "u1", restarts=1, last={"terminated": {"exitCode": 137}}))
    info = tracker.get("w-0")
    assert info is not None and info.state is NodeState.RUNNING
    assert timeline.select(NodeEv.RESTARTED)[0].data.exit_code == 137


def test_a_container_ending_while_its_pod_is_deleted_is_a_loss_not_an_exit(timeline: Timeline):
    tracker = PodTracker(timeline, final_exit=final_exit)
    tracker.on_event("ADDED", pod("w-0", "u1"))
    tracker.on_event("MODIFIED", pod("w-0", "u1", deleting=True, state={"terminated": {"exitCode": 1}}))
    tracker.on_event("DELETED", pod("w-0", "u1", deleting=True, state={"terminated": {"exitCode": 1}}))
    info = tracker.get("w-0")
    assert info is not None and info.state is NodeState.LOST and not timeline.select(NodeEv.EXITED)


def test_a_pod_on_a_lost_machine_is_lost_at_once_and_its_late_deletion_is_no_news(timeline: Timeline):
    tracker = PodTracker(timeline, final_exit=final_exit)
    tracker.on_event("ADDED", pod("w-1", "u1"))
    tracker.mark_lost("w-1")
    assert tracker.get("w-1").state is NodeState.LOST       # type: ignore[union-attr]
    tracker.on_event("DELETED", pod("w-1", "u1"))               # the pod GC, a minute later
    assert not timeline.select(NodeEv.LOST)
    tracker.on_event("ADDED", pod("w-1", "u2", ip="10.88.5.2", machine="ec-node-5"))
    started = timeline.select(NodeEv.STARTED)[-1]
    assert started.data.replaces == "w-1" and tracker.get("w-1").labels["address"] == "10.88.5.2"  # type: ignore


# -- spot notices ---------------------------------------------------------------------------------
def test_each_pod_sees_the_notices_of_its_own_machine():
    machines = {"127.0.0.1": "ec-node-3"}
    server = NoticeServer("127.0.0.1", (0, 0), machines.get).start()
    try:
        seen: list[str] = []
        watcher = SpotNoticeWatcher(server.endpoint, interval_s=0.05, on_notice=lambda n: seen.append(n.kind))
        watcher.poll_once()
        assert seen == []
        server.announce_interruption("ec-node-9", time.time() + 60)      # another machine's
        watcher.poll_once()
        assert seen == []
        server.recommend_rebalance("ec-node-3", time.time())
        server.announce_interruption("ec-node-3", time.time() + 60)
        watcher.poll_once()
        assert seen == ["rebalance", "interruption"]
        assert {m for _, _, m, _ in server.requests} == {"ec-node-3"}
    finally:
        server.close()


# -- the replacement, split ------------------------------------------------------------------------
def test_a_machine_replacement_is_split_into_provision_join_and_rejoin():
    f = 1000.0
    ev = [Event.make(NodeEv.PROVISIONING, f + 1, None, {"replaces": "w-1", "machine": "m-0", "delay_s": 3.0}),
          Event.make(NodeEv.MACHINE_ADDED, f + 11, None, {"machine": "m-1", "ready": False}),
          Event.make(NodeEv.MACHINE_READY, f + 13, None, {"machine": "m-1"}),
          Event.make(NodeEv.PROVISIONED, f + 13.1, None, {"replaces": "w-1", "machine": "m-1"}),
          Event.make(NodeEv.STARTED, f + 60, "w-1", {"replaces": "w-1"}),
          Event.make(RdzvEv.ROUND_COMPLETE, f + 70, None, {"participants": [{"node": "w-1"}]})]
    rec = analyze_fault(ev, fault="kill-node", target="w-1", injected_at=f)
    assert (rec.provision_s, rec.join_s, rec.rejoin_s, rec.replacement_s) == (11.0, 2.0, 57.0, 70.0)


def test_no_machine_split_where_no_machine_was_provisioned():
    rec = analyze_fault([], fault="kill-node", target="node-1", injected_at=0.0)
    assert (rec.provision_s, rec.join_s, rec.rejoin_s) == (None, None, None)
    assert not any("machine" in m for m in rec.missing)


def test_threads_left_behind_are_none():
    assert not [t for t in threading.enumerate() if t.name.startswith(("provision-for-", "imds-stand-in"))]


def test_a_straggler_slows_only_machines_that_can_stop_several_times_a_second(tmp_path: Path):
    from elastic_chaos.platforms.kubernetes.kind_cluster import KindMachines
    from elastic_chaos.platforms.kubernetes.machines import FreezerSwitch
    kind = KindMachines("true", None)  # type: ignore[arg-type]  # no API call is made
    assert "pause" in (kind.unavailable(MachineOp.SLOW) or "")
    state = tmp_path / "freezer.state"
    switch = FreezerSwitch(state)
    switch.stop()
    assert state.read_text() == "FROZEN"
    switch.cont()
    assert state.read_text() == "THAWED"
