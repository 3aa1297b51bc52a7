"""Degraded links between local nodes (root, ``network=isolated``): the LinkDegrader capability.

Each degradation is made by elastic_chaos.host.links in the namespaces and on the veths of the
nodes it names, measured by a probe across the link (a baseline before, the degraded link
after) and held here by name until ``restore`` removes exactly what it made.
"""
from __future__ import annotations

import itertools
import threading
import time
from typing import TYPE_CHECKING

from elastic_chaos.errors import InjectionFailed, SetupError
from elastic_chaos.host import links, netns
from elastic_chaos.platforms import capabilities as caps
from elastic_chaos.platforms.nodes import Hit

if TYPE_CHECKING:
    from elastic_chaos.platforms.local.local_host import LocalHost

PROBE_COUNT = 400
"""UDP echoes per probe (5 ms apart: 2 s): 400 put a 5 % loss-each-way estimate within about 0.8
points (one sigma), so the hypotheses' 3-point slack is nearly 4 sigma."""
STORE_PROBE_COUNT = 60
"""TCP connects to the store's relay per probe (a lost SYN or SYN-ACK costs a 1 s retransmit)."""
STORE_PROBE_BUDGET_S = 15.0
"""The most a store probe takes (a connect across a 2.5 s delay each way takes 5 s: 3 connects)."""
PROBE_STREAM_S = 1.0
"""Seconds of TCP stream that measure a rate cap."""


class LocalLinks(caps.LinkDegrader):
    """Loss and down (iptables in the nodes' namespaces), a rate cap (HTB on their veths)."""

    platform: LocalHost

    def __init__(self, platform: LocalHost) -> None:
        super().__init__(platform)
        self._held: dict[str, tuple[links.Degradation, links.Flapper | None]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

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
                 to_store: bool) -> Hit:
        if to_store:
            return self._degrade_store(node, loss=loss, delay_ms=delay_ms, jitter_ms=jitter_ms)
        if not peers:
            peers = tuple(n for n in self.platform_nodes() if n != node)
        if not peers:
            raise InjectionFailed(f"{node} has no live peer to degrade its link to")
        if node in peers:
            raise InjectionFailed(f"{node} cannot be its own peer")
        end, others = self._end(node), tuple(self._end(p) for p in peers)
        with self._lock:
            number = next(self._ids)
        d = links.Degradation(f"{self.platform_short()}{number}", end, others, queue=number)
        wants_rate = rate_kbit is not None
        flapper: links.Flapper | None = None
        try:
            baseline = links.probe(end, others[0], count=50, interval_s=0.002, wait_s=0.5,
                                   stream_s=PROBE_STREAM_S if wants_rate else 0.0)
            at = time.time()
            if down_s is not None and up_s is not None:
                flapper = links.Flapper(d, down_s, up_s)
                flapper.start()
                action = "flap"
                measured = links.probe(end, others[0], count=20, interval_s=min(0.02, down_s / 40),
                                       wait_s=min(0.5, down_s / 4))
            else:
                if delay_ms is not None:
                    links.set_delay(d, delay_ms / 1000, jitter_ms / 1000)
                if loss > 0:
                    links.set_loss(d, loss)
                if rate_kbit is not None:
                    links.set_rate(d, rate_kbit)
                action = "+".join(what for what, on in (("delay", delay_ms is not None), ("loss", loss > 0),
                                                        ("rate", wants_rate)) if on)
                # the last echoes wait out the round trip the delay makes (a 6 s delay: 12 s)
                wait_s = 1.0 + 2 * ((delay_ms or 0.0) + jitter_ms) / 1000
                measured = links.probe(end, others[0], count=PROBE_COUNT, wait_s=wait_s,
                                       stream_s=PROBE_STREAM_S if wants_rate else 0.0)
        except SetupError as exc:
            if flapper is not None:
                try:
                    flapper.stop()
                except SetupError:
                    pass    # its error is the one below's cause, or follows from it
            links.remove(d)
            raise InjectionFailed(f"could not degrade the link {node} <-> {', '.join(peers)}: {exc}") from exc
        with self._lock:
            self._held[d.ident] = (d, flapper)
        return Hit(node=node, at=at, action=action, detail={
            "link": d.ident, "peers": list(peers), "probed": others[0].node,
            "baseline": baseline.to_json(), "probe": measured.to_json()})

    def _degrade_store(self, node: str, *, loss: float, delay_ms: float | None, jitter_ms: float) -> Hit:
        """The node's link to etcd: its relay's port on the namespace's loopback, both ways."""
        rec = self.platform.record(node)
        relay = rec.relay if rec is not None else None
        if relay is None:
            host = self.platform.store_host()
            raise InjectionFailed(f"{node} reaches no rendezvous store through a relay (c10d: the store is on "
                                  f"{host or 'a node'}; degrade --between {node} {host or 'STORE-HOST'} instead)")
        end = self._end(node)
        with self._lock:
            number = next(self._ids)
        d = links.Degradation(f"{self.platform_short()}{number}", end, (), queue=number, store_port=relay.port)
        try:
            baseline = links.probe_connects(end, relay.port, count=10)
            at = time.time()
            if delay_ms is not None:
                links.set_delay(d, delay_ms / 1000, jitter_ms / 1000)
            if loss > 0:
                links.set_loss(d, loss)
            measured = links.probe_connects(end, relay.port, count=STORE_PROBE_COUNT, budget_s=STORE_PROBE_BUDGET_S)
        except SetupError as exc:
            links.remove(d)
            raise InjectionFailed(f"could not degrade {node}'s link to the rendezvous store: {exc}") from exc
        with self._lock:
            self._held[d.ident] = (d, None)
        action = "store-" + "+".join(w for w, on in (("delay", delay_ms is not None), ("loss", loss > 0)) if on)
        return Hit(node=node, at=at, action=action, detail={
            "link": d.ident, "peers": [], "probed": "store", "baseline": baseline.to_json(),
            "probe": measured.to_json()})

    def _restore(self, node: str, link: str) -> Hit:
        with self._lock:
            held = self._held.pop(link, None)
        at = time.time()
        if held is None:
            return Hit(node=node, at=at, action="nothing-to-restore")
        d, flapper = held
        errors: list[str] = []
        flaps: list[list[float | None]] = []
        if flapper is not None:
            try:
                flapper.stop()
            except SetupError as exc:
                errors.append(str(exc))
            flaps = [[round(a, 3), None if b is None else round(b, 3)] for a, b in flapper.flaps]
        errors += links.remove(d)
        if not errors:      # checked, not assumed: no chain, queue or shaping qdisc of it on either end's link
            errors += [f for e in (d.node, *d.peers) if self._exists(e)
                       for f in links.leftovers(e.netns, e.host_veth, d)]
        if errors:
            raise InjectionFailed(f"restoring the link {link} of {node}: " + "; ".join(errors))
        return Hit(node=node, at=at, action="restored", detail={"link": link, "flaps": flaps})

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
