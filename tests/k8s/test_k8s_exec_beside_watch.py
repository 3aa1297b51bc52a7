"""An exec and the pod watch side by side on one injected client, against the real API server.

``kubernetes.stream.stream()`` swaps the call method of the ApiClient it is given for its
websocket one while it opens an exec stream. The platform's pod watch listed through the same
client, so a watch request made meanwhile went down the websocket path and the watch died with
"(0) Reason: Handshake status 400 Bad Request": a cluster scenario whose hypothesis held failed
on the toolkit's own race (issue 25). Exec streams now open on a client of their own.

There is no kubelet here, so the exec itself fails; it is aimed at a node whose kubelet address
holds every connection for a few seconds (a slow kubelet), which keeps the exec's websocket
handshake open that long, while the watch (1 s streams) opens new streams. What is checked: the
watch opened streams during the exec, took no error, and still delivers events after it.
"""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from k8s_testenv import until

from elastic_chaos.errors import InjectionFailed
from elastic_chaos.platforms.kubernetes.podexec import exec_in
from elastic_chaos.platforms.kubernetes.watch import ObjectWatch

pytestmark = pytest.mark.k8s_api

HOLD_S = 4.0


class HoldingKubelet:
    """A kubelet address on 127.0.0.1 that accepts each connection and closes it ``hold_s`` later
    without a word: the API server's exec proxy waits on it that long, then gives up."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._serve, name="holding-kubelet", daemon=True)

    def start(self) -> HoldingKubelet:
        self._thread.start()
        return self

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            held = threading.Thread(target=self._hold, args=(conn,), daemon=True)
            self._threads.append(held)
            held.start()

    def _hold(self, conn: socket.socket) -> None:
        self._stop.wait(self.hold_s)
        conn.close()

    def stop(self) -> None:
        self._stop.set()
        for thread in [self._thread, *self._threads]:
            thread.join(5)
        self.sock.close()


@pytest.fixture
def slow_node(core: Any, namespace: str) -> Iterator[str]:
    """A Node whose kubelet endpoint is a :class:`HoldingKubelet`; deleted after the test."""
    kubelet = HoldingKubelet(HOLD_S).start()
    name = f"{namespace}-slow-kubelet"
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                      "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                                 "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet.port}}}},
                     _preload_content=False)
    try:
        yield name
        assert kubelet.connections >= 1, "the API server never reached for the node's kubelet"
    finally:
        kubelet.stop()
        core.delete_node(name, _preload_content=False)


def pod(name: str, node: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "worker", "image": "none"}]}}


def test_an_exec_leaves_the_pod_watch_on_the_same_client_working(core, namespace, slow_node):
    core.create_namespaced_pod(namespace, pod("worker-0", slow_node), _preload_content=False)
    seen: list[str] = []
    watch = ObjectWatch("pods", core.list_namespaced_pod, lambda kind, obj: seen.append(obj["metadata"]["name"]),
                        window_s=1, namespace=namespace).start()
    try:
        before, t0 = watch.streams, time.monotonic()
        # the exec goes through the very CoreV1Api the watch lists with, as the node faults' does
        with pytest.raises(InjectionFailed, match="exec in pod .*/worker-0 failed"):
            exec_in(core, namespace, "worker-0", "worker", "true", timeout_s=10)
        held = time.monotonic() - t0
        opened = watch.streams - before
        assert held >= HOLD_S - 1, f"the exec's handshake was open {held:.1f}s only: no overlap to test"
        assert opened >= 2, f"the watch opened {opened} streams while the exec was open: no overlap to test"
        assert watch.error is None, f"the watch died beside the exec: {watch.error!r}"
        core.create_namespaced_pod(namespace, pod("worker-1", slow_node), _preload_content=False)
        until("the watch to deliver worker-1, made after the exec", lambda: "worker-1" in seen)
    finally:
        watch.stop()   # re-raises what killed the watch, if anything did
