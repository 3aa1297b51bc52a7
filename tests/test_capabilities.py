"""A platform offers the capabilities it implements; what it lacks is derived from that, and a fault
that needs a capability its platform lacks is refused with the reason (no platform lists what it
cannot do). A new capability is one class and its implementations: the platform base does not grow."""
from __future__ import annotations

from pathlib import Path

import pytest

from elastic_chaos.errors import FaultUnavailable
from elastic_chaos.events import NodeEv, Timeline
from elastic_chaos.faults.hang import Freeze, Partition
from elastic_chaos.platforms import capabilities as caps
from elastic_chaos.platforms.api import Hit, NodeInfo, NodeState, Platform
from elastic_chaos.spec import JobSpec


class Frozen(caps.Freezer):
    """A freezer that records what it did (no processes: the platform below has none)."""

    def __init__(self, platform: caps.Host) -> None:
        super().__init__(platform)
        self.done: list[str] = []

    def _freeze(self, node: str) -> Hit:
        self.done.append(f"freeze {node}")
        return Hit(node=node, at=1.0, action="test-freeze")

    def _thaw(self, node: str) -> Hit:
        self.done.append(f"thaw {node}")
        return Hit(node=node, at=2.0, action="test-thaw")


class Unrooted(caps.Freezer):
    def unavailable(self) -> str | None:
        return "freezing needs root here"

    def _freeze(self, node: str) -> Hit:
        raise AssertionError("never called")

    def _thaw(self, node: str) -> Hit:
        raise AssertionError("never called")


class OneNode(Platform):
    """A platform of one node that can only freeze it (a stand-in: no processes)."""

    name = "one-node"

    def __init__(self, timeline: Timeline, work_dir: Path, freezer: type[caps.Freezer] = Frozen) -> None:
        super().__init__(timeline, work_dir)
        self.freezer = freezer(self)

    def _offers(self) -> tuple[caps.Capability, ...]:
        return (self.freezer,)

    def _start(self, job: JobSpec) -> None: ...

    def _stop(self) -> None: ...

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo("node-0", NodeState.RUNNING, 0.0)]

    def node_logs(self) -> dict[str, Path]:
        return {}

    def etcd_endpoint(self) -> str | None:
        return None

    def _kill_node(self, node: str, *, graceful: bool, grace_s: float) -> Hit:
        return Hit(node=node, at=0.0, action="test-kill")


def test_what_a_platform_does_not_offer_it_lacks_in_words(tmp_path):
    p = OneNode(Timeline(), tmp_path)
    assert p.lacks(caps.Freezer) is None
    assert p.lacks(caps.Partitioner) == "network partition is not supported on the one-node platform"
    with pytest.raises(FaultUnavailable, match="network partition is not supported"):
        p.capability(caps.Partitioner)
    assert Partition().unavailable(p) == "network partition is not supported on the one-node platform"
    assert Freeze().unavailable(p) is None


def test_an_offered_capability_unavailable_here_says_why(tmp_path):
    p = OneNode(Timeline(), tmp_path, freezer=Unrooted)
    assert p.lacks(caps.Freezer) == "freezing needs root here"
    assert Freeze().unavailable(p) == "freezing needs root here"


def test_a_capability_checks_its_target_and_records_what_it_did(tmp_path):
    tl = Timeline()
    p = OneNode(tl, tmp_path)
    record = Freeze(node="node-0").inject(p, tl)
    assert record.hit is not None and record.hit.action == "test-freeze"
    assert [e.type for e in tl.select(NodeEv.FROZEN)] == [NodeEv.FROZEN]
    Freeze().revert(p, tl, record)
    assert isinstance(p.freezer, Frozen) and p.freezer.done == ["freeze node-0", "thaw node-0"]
    from elastic_chaos.errors import InjectionFailed
    with pytest.raises(InjectionFailed, match="no node named node-9"):
        p.capability(caps.Freezer).freeze("node-9")


def test_every_platform_offers_only_known_capabilities(tmp_path):
    from elastic_chaos.platforms.local.platform import LocalPlatform
    local = LocalPlatform(Timeline(), tmp_path)
    offered = local._offered()
    assert set(offered) <= set(caps.CAPABILITIES) and caps.Freezer in offered
    assert all(isinstance(impl, kind) for kind, impl in offered.items())
