"""Degraded links between local nodes (root, ``network=isolated``): the LinkDegrader capability.

Each degradation is made by elastic_chaos.host.links in the namespaces and on the veths of the
nodes it names, measured by a probe across the link (a baseline before, the degraded link
after) and held here by name until ``restore`` removes exactly what it made.
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from elastic_chaos.errors import InjectionFailed, SetupError
from elastic_chaos.host import links, netns
from elastic_chaos.platforms import capabilities as caps
from elastic_chaos.platforms.linkbook import LinkBook, apply
from elastic_chaos.platforms.nodes import Hit

if TYPE_CHECKING:
    from elastic_chaos.platforms.local.local_host import LocalHost

STORE_PROBE_COUNT = 60
"""TCP connects to the store's relay per probe (a lost SYN or SYN-ACK costs a 1 s retransmit)."""
STORE_PROBE_BUDGET_S = 15.0
"""The most a store probe takes (a connect across a 2.5 s delay each way takes 5 s: 3 connects)."""


class LocalLinks(caps.LinkDegrader):
    """Loss and down (iptables in the nodes' namespaces), a rate cap (HTB on their veths)."""

    platform: LocalHost

    def __init__(self, platform: LocalHost) -> None:
        super().__init__(platform)
        self._book: LinkBook | None = None
        self._lock = threading.Lock()

    @property
    def book(self) -> LinkBook:
        """The run's degraded links (named after its network, which exists once nodes start)."""
        with self._lock:
            if self._book is None:
                self._book = LinkBook(self.platform_short())
            return self._book

    def unavailable(self) -> str | None:
        reason = netns.unavailable_reason() or links.unavailable_reason()
        if reason:
            return "link faults need isolated node networking: " + reason
        if not self.platform.isolated():
            return ("link faults need the platform option network=isolated (nodes in their own network "
                    "namespaces); on the host's loopback there is no link between nodes to degrade")
        return None

    def _end(self, node: str) -> links.End:
        network = self.platform.network
        net = network.nodes.get(node) if network is not None else None
        if net is None:
            raise InjectionFailed(f"{node} has no network namespace of its own (is it alive?)")
        return links.End(node, net.netns, net.address, net.host_veth)

    def _degrade(self, node: str, peers: tuple[str, ...], *, loss: float, rate_kbit: int | None,
                 down_s: float | None, up_s: float | None, delay_ms: float | None, jitter_ms: float,
                 to_store: bool, reverse_delay_ms: float | None = None, reverse_jitter_ms: float | None = None,
                 burst: float | None = None) -> Hit:
        if to_store:
            return self._degrade_store(node, loss=loss, delay_ms=delay_ms, jitter_ms=jitter_ms,
                                       reverse_delay_ms=reverse_delay_ms, reverse_jitter_ms=reverse_jitter_ms,
                                       burst=burst)
        if not peers:
            peers = tuple(n for n in self.platform_nodes() if n != node)
        if not peers:
            raise InjectionFailed(f"{node} has no live peer to degrade its link to")
        if node in peers:
            raise InjectionFailed(f"{node} cannot be its own peer")
        end, others = self._end(node), tuple(self._end(p) for p in peers)
        return self.book.degrade(node, end, others, peers, loss=loss, rate_kbit=rate_kbit, down_s=down_s,
                                 up_s=up_s, delay_ms=delay_ms, jitter_ms=jitter_ms, reverse_delay_ms=reverse_delay_ms,
                                 reverse_jitter_ms=reverse_jitter_ms, burst=burst)

    def _degrade_store(self, node: str, *, loss: float, delay_ms: float | None, jitter_ms: float,
                       reverse_delay_ms: float | None = None, reverse_jitter_ms: float | None = None,
                       burst: float | None = None) -> Hit:
        """The node's link to etcd: its relay's port on the namespace's loopback, both ways (each
        read by a queue of its own where the two directions differ or the loss is bursty). The
        probe is TCP connects: a round trip, never split by direction."""
        rec = self.platform.record(node)
        relay = rec.relay if rec is not None else None
        if relay is None:
            host = self.platform.store_host()
            raise InjectionFailed(f"{node} reaches no rendezvous store through a relay (c10d: the store is on "
                                  f"{host or 'a node'}; degrade --between {node} {host or 'STORE-HOST'} instead)")
        end = self._end(node)
        apart = burst is not None or reverse_delay_ms is not None or reverse_jitter_ms is not None
        d = self.book.new(end, (), store_port=relay.port, queues=2 if apart else 1)
        try:
            baseline = links.probe_connects(end, relay.port, count=10)
            at = time.time()
            action = "store-" + apply(d, loss=loss, rate_kbit=None, delay_ms=delay_ms, jitter_ms=jitter_ms,
                                      reverse_delay_ms=reverse_delay_ms, reverse_jitter_ms=reverse_jitter_ms,
                                      burst=burst)
            measured = links.probe_connects(end, relay.port, count=STORE_PROBE_COUNT, budget_s=STORE_PROBE_BUDGET_S)
        except SetupError as exc:
            links.remove(d)
            raise InjectionFailed(f"could not degrade {node}'s link to the rendezvous store: {exc}") from exc
        self.book.hold(d)
        drops = {"drops": d.drops()} if burst is not None else {}
        return Hit(node=node, at=at, action=action, detail={
            "link": d.ident, "peers": [], "probed": "store", "baseline": baseline.to_json(),
            "probe": measured.to_json(), **drops})

    def _restore(self, node: str, link: str) -> Hit:
        return self.book.restore(node, link, self._exists)

    def _exists(self, end: links.End) -> bool:
        network = self.platform.network
        return network is not None and end.node in network.nodes and network.nodes[end.node].netns == end.netns

    def platform_nodes(self) -> list[str]:
        network = self.platform.network
        return [n for n in (network.nodes if network is not None else {})
                if (rec := self.platform.record(n)) is not None and rec.info.state.is_alive()]

    def platform_short(self) -> str:
        network = self.platform.network
        return network.short if network is not None else "x"
