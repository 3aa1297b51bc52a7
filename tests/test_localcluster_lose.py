"""`lose_node` kills the node's processes at once, without waiting for the cluster's lock: in a cascade
the second loss came while the first one's cleanup held the lock (removing a node's image links takes
seconds under load), the second node's agent ran on for 4 s and joined the survivors' new round, and
the fault was stamped at the call. Here the lock is held by the test, the "node" is a recorded process,
and the parts that need a real cluster (the API server, the host network) are stood in for."""
from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from elastic_chaos.localcluster import ops
from elastic_chaos.localcluster.base import Layout, locked, save_state, start_time
from elastic_chaos.localcluster.names import HostNames


class NoApi:
    def __init__(self, layout: Layout) -> None:
        pass

    def delete_node(self, name: str) -> None:
        pass


def test_a_node_is_killed_while_another_command_holds_the_lock_and_stamped_when_it_died(tmp_path: Path, monkeypatch):
    layout = Layout(tmp_path / ".cluster")
    init = subprocess.Popen(["sleep", "300"], start_new_session=True)
    names = HostNames.for_id("1057c0de")
    save_state(layout, {"id": names.cluster_id, "next_index": 3,
                        "nodes": {"ec-node-2": {"index": 2, "init": {"pid": init.pid, "start": start_time(init.pid),
                                                                    "args": ["sleep"]}}}})
    layout.node_dir("ec-node-2").mkdir(parents=True)
    cleaned: list[str] = []
    monkeypatch.setattr(ops, "Api", NoApi)
    monkeypatch.setattr(ops, "cleanup_node", lambda state, name: cleaned.append(name))
    held, release = threading.Event(), threading.Event()

    def another_command() -> None:
        with locked(layout):
            held.set()
            release.wait(30)

    other = threading.Thread(target=another_command)
    other.start()
    try:
        assert held.wait(10)
        done: list[float] = []
        loser = threading.Thread(target=lambda: done.append(ops.lose_node(layout, "ec-node-2")))
        began = time.time()
        loser.start()
        init.wait(10)                              # dead while the lock is still held
        assert init.returncode is not None and not done and not cleaned
        time.sleep(0.5)
        released = time.time()
        release.set()
        loser.join(30)
        assert done and began <= done[0] < released          # stamped at the kill, not after the lock
        assert cleaned == ["ec-node-2"] and not layout.node_dir("ec-node-2").exists()
        assert not list(layout.node_dir("ec-node-2").parent.glob(".ec-node-2.lost"))
    finally:
        release.set()
        other.join(30)
        if init.poll() is None:
            init.kill()
            init.wait(10)


def test_losing_a_node_the_cluster_does_not_have_kills_nothing_and_says_so(tmp_path: Path):
    layout = Layout(tmp_path / ".cluster")
    save_state(layout, {"id": "1057c0de", "next_index": 1, "nodes": {}})
    with pytest.raises(ops.ClusterError, match="no node ec-node-5 in this cluster"):
        ops.lose_node(layout, "ec-node-5")
