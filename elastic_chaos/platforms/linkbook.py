"""The degraded links of one run, by name: made, measured and removed the same way on every platform.

A platform that can degrade a link (the LinkDegrader capability) resolves its two ends (a
local node's namespace and veth, a local-cluster machine's: elastic_chaos.host.links.End);
everything after that is here: a baseline probe across the link, the degradation
(elastic_chaos.host.links), the probe again once it bites, the degradation held under its
name until ``restore`` removes exactly what it made and checks that none of it is left.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from elastic_chaos.errors import InjectionFailed, SetupError
from elastic_chaos.host import links
from elastic_chaos.platforms.nodes import Hit

PROBE_COUNT = 400
"""UDP echoes per probe (5 ms apart: 2 s): 400 put a 5 % loss-each-way estimate within about 0.8
points (one sigma), so the hypotheses' 3-point slack is nearly 4 sigma."""
PROBE_STREAM_S = 1.0
"""Seconds of TCP stream that measure a rate cap."""

Present = Callable[[links.End], bool]
"""Whether an end's namespace is still the one the link was made in (a gone end has nothing to check)."""


class LinkBook:
    """The degradations one platform made, each under its name (``<prefix><n>``: the chain
    ``EC-<name>``), with their netfilter queue numbers counted from ``first_queue``."""

    def __init__(self, prefix: str, *, first_queue: int = 1) -> None:
        self.prefix = prefix
        self._held: dict[str, tuple[links.Degradation, links.Flapper | None]] = {}
        self._ids = itertools.count(0)
        self._queues = itertools.count(first_queue)
        self._lock = threading.Lock()

    def new(self, node: links.End, peers: tuple[links.End, ...], *, store_port: int | None = None,
            queues: int = 1) -> links.Degradation:
        """A fresh, empty degradation between ``node`` and ``peers`` (nothing made yet), with
        ``queues`` netfilter queue numbers of its own (2: the store's link read per direction)."""
        with self._lock:
            n = next(self._ids)
            numbers = [next(self._queues) for _ in range(queues)]
        return links.Degradation(f"{self.prefix}{n + 1}", node, peers, queue=numbers[0],
                                 reverse_queue=numbers[1] if len(numbers) > 1 else None, store_port=store_port)

    def hold(self, d: links.Degradation, flapper: links.Flapper | None = None) -> None:
        """Keep ``d`` (made) until ``restore`` of its name."""
        with self._lock:
            self._held[d.ident] = (d, flapper)

    def degrade(self, node: str, end: links.End, others: tuple[links.End, ...], peers: tuple[str, ...], *,
                loss: float, rate_kbit: int | None, down_s: float | None, up_s: float | None,
                delay_ms: float | None, jitter_ms: float, reverse_delay_ms: float | None = None,
                reverse_jitter_ms: float | None = None, burst: float | None = None,
                detail: dict[str, Any] | None = None) -> Hit:
        """Probe the link from ``end`` to ``others[0]``, degrade it between ``end`` and every one of
        ``others`` as asked, probe it again, hold it. Blocks for the probes (a few seconds; the
        delay's round trip more). ``reverse_*``: the delay of the packets the peers send the node,
        where it differs (None: the same as ``delay_ms``, ``jitter_ms``); ``burst``: the loss in
        bursts of that many packets on average (None: independent). ``peers``: the job's names for
        the other ends, for the record; ``detail``: more for the hit's (with a bursty loss, ``drops``:
        what its readers had dropped by the end of the probe). InjectionFailed, with nothing left
        made, if it could not."""
        d = self.new(end, others)
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
                action = apply(d, loss=loss, rate_kbit=rate_kbit, delay_ms=delay_ms, jitter_ms=jitter_ms,
                                reverse_delay_ms=reverse_delay_ms, reverse_jitter_ms=reverse_jitter_ms, burst=burst)
                # the last echoes wait out the round trip the delay makes (a 6 s delay: 12 s)
                wait_s = 1.0 + round_trip_ms(delay_ms, jitter_ms, reverse_delay_ms, reverse_jitter_ms) / 1000
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
        self.hold(d, flapper)
        drops = {"drops": d.drops()} if burst is not None else {}
        return Hit(node=node, at=at, action=action, detail={
            "link": d.ident, "peers": list(peers), "probed": others[0].node,
            "baseline": baseline.to_json(), "probe": measured.to_json(), **drops, **(detail or {})})

    def restore(self, node: str, link: str, present: Present) -> Hit:
        """Remove every rule, queue and qdisc of ``link`` (a flapping link left up) and check that
        none of it is left on an end still ``present``; InjectionFailed naming what is. Idempotent:
        an unknown (or already restored) link is nothing to restore."""
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
        drops = d.drops()       # a bursty loss's readers' tallies over the whole fault, before they go
        errors += links.remove(d)
        if not errors:      # checked, not assumed: no chain, queue or shaping qdisc of it on either end's link
            errors += [f for e in (d.node, *d.peers) if present(e) for f in links.leftovers(e.netns, e.host_veth, d)]
        if errors:
            raise InjectionFailed(f"restoring the link {link} of {node}: " + "; ".join(errors))
        return Hit(node=node, at=at, action="restored", detail={"link": link, "flaps": flaps,
                                                                 **({"drops": drops} if drops else {})})

    def held(self) -> list[str]:
        """The names of the links degraded now."""
        with self._lock:
            return list(self._held)

    def release_all(self, present: Present) -> list[str]:
        """Teardown: restore every link still degraded; returns what could not be (empty: all clean)."""
        errors: list[str] = []
        for link in self.held():
            try:
                self.restore(link, link, present)
            except InjectionFailed as exc:
                errors.append(str(exc))
        return errors


def round_trip_ms(delay_ms: float | None, jitter_ms: float, reverse_delay_ms: float | None = None,
                  reverse_jitter_ms: float | None = None) -> float:
    """The longest round trip a delay adds: each way's delay plus its jitter (the reverse way's
    None: the same as the other)."""
    if delay_ms is None:
        return 0.0
    back = delay_ms if reverse_delay_ms is None else reverse_delay_ms
    back_jitter = jitter_ms if reverse_jitter_ms is None else reverse_jitter_ms
    return delay_ms + jitter_ms + back + back_jitter


def _ms(v: float | None) -> float | None:
    return None if v is None else v / 1000


def apply(d: links.Degradation, *, loss: float, rate_kbit: int | None, delay_ms: float | None,
           jitter_ms: float, reverse_delay_ms: float | None = None, reverse_jitter_ms: float | None = None,
           burst: float | None = None) -> str:
    """Delay, loss and a rate cap on ``d`` as asked; the action's name (``delay+loss``, ...;
    ``bursty-loss``). Also the store link's (elastic_chaos.platforms.local.links), without a rate cap."""
    if delay_ms is not None:
        links.set_delay(d, delay_ms / 1000, jitter_ms / 1000, reverse_delay_s=_ms(reverse_delay_ms),
                        reverse_jitter_s=_ms(reverse_jitter_ms))
    if loss > 0 and burst is not None:
        links.set_bursty_loss(d, loss, burst)
    elif loss > 0:
        links.set_loss(d, loss)
    if rate_kbit is not None:
        links.set_rate(d, rate_kbit)
    lossy = "bursty-loss" if burst is not None else "loss"
    return "+".join(what for what, on in (("delay", delay_ms is not None), (lossy, loss > 0),
                                          ("rate", rate_kbit is not None)) if on)
