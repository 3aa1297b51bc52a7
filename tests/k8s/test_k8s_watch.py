"""Watches resume from resourceVersion after a cut stream and recover from 410 Gone,
against a real API server (no event lost, none seen twice)."""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from elastic_chaos.errors import PlatformError
from elastic_chaos.events import EventType, NodeEv, Timeline, field_value
from elastic_chaos.platforms.kubernetes.pods import MachineTracker
from elastic_chaos.platforms.kubernetes.watch import ObjectWatch

pytestmark = pytest.mark.k8s_api


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "w"}},
            "spec": {"containers": [{"name": "c", "image": "none"}]}}


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.cond = threading.Condition()

    def __call__(self, kind: str, obj: dict[str, Any]) -> None:
        with self.cond:
            self.events.append((kind, obj["metadata"]["name"]))
            self.cond.notify_all()

    def wait_for(self, count: int, timeout_s: float = 15.0) -> list[tuple[str, str]]:
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while len(self.events) < count and time.monotonic() < deadline:
                self.cond.wait(0.1)
            return list(self.events)


class Partition:
    """Wraps a list function; while ``cut`` is set, watch requests fail like a dead network."""

    def __init__(self, list_fn: Any) -> None:
        self.list_fn = list_fn
        self.cut = threading.Event()
        self.attempts = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("watch") and self.cut.is_set():
            self.attempts += 1
            time.sleep(0.05)
            raise ConnectionResetError("network partition (test)")
        return self.list_fn(*args, **kwargs)


def delete(core: Any, namespace: str, name: str) -> None:
    core.delete_namespaced_pod(name, namespace, body={"gracePeriodSeconds": 0}, _preload_content=False)


def test_a_cut_stream_resumes_from_the_last_resource_version_without_loss_or_duplicates(core, namespace):
    rec = Recorder()
    core.create_namespaced_pod(namespace, pod("before"), _preload_content=False)
    watch = ObjectWatch("pods", core.list_namespaced_pod, rec, window_s=30, namespace=namespace).start()
    try:
        for name in ("a", "b"):
            core.create_namespaced_pod(namespace, pod(name), _preload_content=False)
        assert rec.wait_for(3) == [("ADDED", "before"), ("ADDED", "a"), ("ADDED", "b")]
        assert watch.wait_streaming()
        streams = watch.streams

        watch.force_reconnect()                                  # the network drops the stream
        core.patch_namespaced_pod("a", namespace, {"metadata": {"labels": {"x": "1"}}}, _preload_content=False)
        delete(core, namespace, "b")
        core.create_namespaced_pod(namespace, pod("c"), _preload_content=False)

        # (a grace-0 delete is a MODIFIED with deletionTimestamp, then the DELETED)
        assert rec.wait_for(7)[3:] == [("MODIFIED", "a"), ("MODIFIED", "b"), ("DELETED", "b"), ("ADDED", "c")]
        time.sleep(0.5)
        assert len(rec.events) == 7                              # nothing replayed after the resume
        assert watch.streams > streams and watch.relists == 0
        assert sorted(watch.objects) == [f"{namespace}/{n}" for n in ("a", "before", "c")]
    finally:
        watch.stop()


def test_a_server_ended_stream_is_resumed_the_same_way(core, namespace):
    rec = Recorder()
    watch = ObjectWatch("pods", core.list_namespaced_pod, rec, window_s=1, namespace=namespace).start()
    try:
        time.sleep(2.5)                                          # the server closes each stream after 1 s
        core.create_namespaced_pod(namespace, pod("late"), _preload_content=False)
        assert rec.wait_for(1) == [("ADDED", "late")]
        assert watch.streams >= 3 and watch.relists == 0
    finally:
        watch.stop()


def test_410_gone_relists_and_replays_what_was_missed_as_synthetic_events(k8s_api, core, namespace):
    for name in ("keep", "change", "drop"):
        core.create_namespaced_pod(namespace, pod(name), _preload_content=False)
    rec = Recorder()
    net = Partition(core.list_namespaced_pod)
    watch = ObjectWatch("pods", net, rec, window_s=30, retry_s=0.05, namespace=namespace).start()
    try:
        assert len(rec.wait_for(3)) == 3
        assert watch.wait_streaming()
        net.cut.set()
        watch.force_reconnect()                                  # away from the server...
        core.patch_namespaced_pod("change", namespace, {"metadata": {"labels": {"x": "1"}}},
                                  _preload_content=False)
        delete(core, namespace, "drop")
        core.create_namespaced_pod(namespace, pod("new"), _preload_content=False)
        k8s_api.compact_etcd()                                   # ...long enough for our version to expire
        while net.attempts < 2:
            time.sleep(0.05)
        net.cut.clear()                                          # back: the real server answers 410 Gone

        replay = rec.wait_for(6)[3:]
        assert sorted(replay) == [("ADDED", "new"), ("DELETED", "drop"), ("MODIFIED", "change")]
        assert watch.relists == 1
        assert sorted(watch.objects) == [f"{namespace}/{n}" for n in ("change", "keep", "new")]

        core.create_namespaced_pod(namespace, pod("after"), _preload_content=False)
        assert rec.wait_for(7)[-1] == ("ADDED", "after")         # and it watches on from the fresh list
    finally:
        watch.stop()


def test_stop_reraises_what_killed_the_watch(k8s_api, namespace):
    from k8s_testenv import api_client
    from kubernetes import client
    nobody = client.CoreV1Api(api_client(k8s_api, "nobody"))
    with pytest.raises(PlatformError, match="could not list pods: HTTP 403 .*forbidden"):
        ObjectWatch("pods", nobody.list_namespaced_pod, Recorder(), namespace=namespace).start(timeout_s=5)


def test_the_node_watch_turns_machine_changes_into_timeline_events(core, namespace, sim):
    timeline = Timeline()
    machines = MachineTracker(timeline)
    watch = ObjectWatch("nodes", core.list_node, machines.on_event, window_s=30).start()
    machines.initial_done()
    try:
        spot = f"{namespace}-spot-0"
        assert machines.ready(spot) is True
        assert watch.wait_streaming()
        watch.force_reconnect()
        sim.set_ready(spot, False)
        core.patch_node(spot, {"spec": {"unschedulable": True}}, _preload_content=False)
        sim.add_machine(f"{namespace}-spot-9")
        core.delete_node(f"{namespace}-spot-1", _preload_content=False)

        def kinds() -> list[tuple[EventType, str]]:
            return [(e.type, e.data.machine) for e in timeline.events()
                    if (field_value(e.data, "machine") or "").startswith(namespace)]
        deadline = time.monotonic() + 10
        while len(kinds()) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert kinds() == [(NodeEv.MACHINE_NOT_READY, spot), (NodeEv.MACHINE_CORDONED, spot),
                           (NodeEv.MACHINE_ADDED, f"{namespace}-spot-9"),
                           (NodeEv.MACHINE_DELETED, f"{namespace}-spot-1")]
    finally:
        watch.stop()
