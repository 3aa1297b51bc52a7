"""Faults of the network between ranks, where every process runs on: loss, a slow link, a flapping one.

- ``packet-loss``: a share of the packets between a node and its peers is dropped, each
  way, at random (a congested or failing link): every collective pays in retransmits.
  ``--burst N``: the same share lost in runs of ``N`` packets on average (a Gilbert-Elliott
  chain: a fading or overflowing link loses packets together, and TCP's retransmits meet it).
- ``bandwidth``: the link between a node and its peers is capped (a shared top-of-rack
  uplink, a cross-AZ hop): collectives that move the gradients take longer.
- ``latency``: every packet between a node and its peers is held ``--delay-ms`` (+-
  ``--jitter-ms``) each way (a cross-AZ hop, a congested path): every collective waits
  for its round trips. ``--reverse-delay-ms`` / ``--reverse-jitter-ms`` set the peers -> node
  way apart (an asymmetric path); ``--delay-ms`` is then the node -> peers way.
- ``flapping-link``: the link goes down for ``--down`` seconds and up for ``--up``, over
  and over, for ``--duration`` (a flapping EFA path, a NIC resetting): while it is down
  nothing passes, no reset is sent; a flap shorter than the collective timeout is a stall.

Each is between one node and chosen peers (``--between NODE PEER...``; a node alone: every
other live node; ``--to-store``, for loss and latency: the node and the rendezvous store),
for ``--duration`` seconds, and measured once applied (a probe across the
link: its loss, round trip and rate go into the fault's record). docs/FAULTS.md says how
each is made and where it differs from netem.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from elastic_chaos.errors import SpecError
from elastic_chaos.events import Timeline
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.api import Fault, FaultPlan, pick_victim
from elastic_chaos.options import DAY_S, option
from elastic_chaos.platforms.api import Hit, Platform
from elastic_chaos.platforms.capabilities import Capability, LinkDegrader

TO_STORE_HELP = ("degrade the node's link to the rendezvous store (etcd, through the node's relay) instead of its "
                 "links to peers: the agents' heartbeats and rendezvous traffic")


@dataclass
class _LinkFault(Fault):
    """A degraded link between a node and its peers, for ``duration_s``."""

    node: str | None = None
    between: tuple[str, ...] = option((), "the node, then its peers whose link with it degrades (a node alone: "
                                          "its link with every other node; default: the fault's target and "
                                          "every other node)", metavar="NODE")
    duration_s: float | None = option(30.0, "seconds the link stays degraded (none: until the end of the run)",
                                      flag="--duration", above=0, units="s", maximum=DAY_S)
    requires: ClassVar[type[Capability] | None] = LinkDegrader

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.store_link and len(self.between) > 1:
            raise SpecError("--to-store degrades the node's link to the rendezvous store: name the node alone "
                            f"(--between {self.between[0]}), not peers")
        if self.between:
            if self.node is not None and self.node != self.between[0]:
                raise SpecError(f"--between starts with {self.between[0]} but the target is {self.node}: "
                                "name the node once (--between NODE PEER...)")
            if len(set(self.between)) != len(self.between):
                raise SpecError(f"--between names a node twice: {' '.join(self.between)}")

    def ends(self, platform: Platform) -> tuple[str, tuple[str, ...]]:
        """(the node, its peers; empty: every other live node). ``node-K`` also names the job's one
        node whose name ends in ``-K`` (on Kubernetes the worker pod ``<run>-worker-K``), so one
        command line fits every platform. SpecError for a name the job has never had (a bad
        input, exit 2); a node it had and lost is the injection's to refuse."""
        if self.between:
            known = [n.name for n in platform.nodes()]
            named = [_known_as(n, known) for n in self.between]
            unknown = [n for n, k in zip(self.between, named, strict=True) if k is None]
            if unknown:
                raise SpecError(f"--between names {', '.join(unknown)}, which this job does not have; its nodes: "
                                f"{', '.join(known) or 'none'}")
            ends = tuple(k for k in named if k is not None)
            return ends[0], ends[1:]
        return pick_victim(platform, self.node), ()

    def shape(self) -> dict[str, Any]:
        """The keywords of LinkDegrader.degrade that make this fault."""
        raise NotImplementedError

    def words(self) -> str:
        raise NotImplementedError

    @property
    def store_link(self) -> bool:
        """Whether it degrades the node's link to the rendezvous store (``--to-store``), not to peers."""
        return bool(getattr(self, "to_store", False))

    def plan(self, platform: Platform) -> FaultPlan:
        node, peers = self.ends(platform)
        who = ", ".join(peers) if peers else "every other live node"
        if self.store_link:
            who = "the rendezvous store (its relay's port on the node's loopback)"
        until = f"for {self.duration_s:g}s" if self.duration_s is not None else "until the end of the run"
        impl = platform.offered(LinkDegrader)
        theirs = impl.plan_steps(self.shape(), node, who, until) if impl is not None else None
        return FaultPlan(self.name, node, theirs or (f"{self.words()} between {node} and {who}, {until}",
                                                     "probe the link (UDP echoes; a TCP stream for a rate cap)",
                                                     "remove every rule and qdisc it made"))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        assert plan.target is not None
        _, peers = self.ends(platform)
        hit = platform.capability(LinkDegrader).degrade(plan.target, peers, **self.shape())
        return FaultRecord(self.name, plan.target, hit.at, hit,
                           {**self.shape(), "duration_s": self.duration_s, "link": hit.detail["link"],
                            "peers": hit.detail["peers"], "probed": hit.detail.get("probed"),
                            "probe": hit.detail["probe"], "baseline": hit.detail["baseline"],
                            "asked_of": hit.detail.get("asked_of"),
                            **({"drops": hit.detail["drops"]} if "drops" in hit.detail else {})})

    def _revert(self, platform: Platform, record: FaultRecord) -> Hit | None:
        assert record.target is not None
        return platform.capability(LinkDegrader).restore(record.target, str(record.detail["link"]))


def _known_as(name: str, known: list[str]) -> str | None:
    """The job's node ``name`` means: itself, else for ``node-K`` the one node named ``...-K``."""
    if name in known:
        return name
    slot = re.fullmatch(r"node-(\d+)", name)
    hits = [k for k in known if slot is not None and k.endswith(f"-{slot.group(1)}")]
    return hits[0] if len(hits) == 1 else None


@dataclass
class PacketLoss(_LinkFault):
    """A share of the packets between a node and its peers dropped at random, each way."""

    rate: float = option(0.05, "the share of packets dropped each way (0.05: 5 %)", above=0, maximum=0.9)
    burst: float | None = option(None, "bursty loss: the mean burst length, in packets lost in a row, at the same "
                                       "--rate (a Gilbert-Elliott chain per receiving side, in user space through "
                                       "the netfilter queue; at least 1 / (1 - rate), which is independent loss; "
                                       "not on EKS). Default: each packet dropped on its own (iptables statistic)",
                                 minimum=1, maximum=1000)
    to_store: bool = option(False, TO_STORE_HELP)
    name: ClassVar[str] = "packet-loss"
    description: ClassVar[str] = ("lossy link: a share of the packets between a node and its peers dropped each way, "
                                  "at random or in bursts")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.burst is not None and self.burst < independent_burst(self.rate) - 1e-9:
            raise SpecError(f"--burst {self.burst:g} at --rate {self.rate:g} is less clustered than independent loss, "
                            f"whose runs of losses already average 1 / (1 - rate) = "
                            f"{independent_burst(self.rate):.3g} packets: give at least that, or leave --burst out "
                            "for independent loss")

    def shape(self) -> dict[str, Any]:
        bursty = {"burst": self.burst} if self.burst is not None else {}
        return {"loss": self.rate, "to_store": self.to_store, **bursty}

    def words(self) -> str:
        if self.burst is not None:
            return (f"drop {self.rate:.1%} of the packets each way in bursts of {self.burst:g} on average "
                    "(a Gilbert-Elliott chain deciding each queued packet: NFQUEUE, receiving side)")
        return f"drop {self.rate:.1%} of the packets each way (iptables statistic, receiving side)"


def independent_burst(rate: float) -> float:
    """The mean run of losses that independent loss at ``rate`` has: 1 / (1 - rate)."""
    return 1.0 / (1.0 - rate)


@dataclass
class Bandwidth(_LinkFault):
    """The link between a node and its peers capped, each way."""

    mbit: float = option(10.0, "the cap each way, in Mbit/s", above=0.01, maximum=100_000)
    name: ClassVar[str] = "bandwidth"
    description: ClassVar[str] = "slow link: the rate between a node and its peers capped each way"

    def shape(self) -> dict[str, Any]:
        return {"rate_kbit": max(1, round(self.mbit * 1000))}

    def words(self) -> str:
        return f"cap the rate at {self.mbit:g} Mbit/s each way (HTB on both veths)"


@dataclass
class FlappingLink(_LinkFault):
    """The link between a node and its peers down and up on a schedule."""

    down_s: float = option(3.0, "seconds the link is down each time", flag="--down", above=0, units="s",
                           maximum=3600)
    up_s: float = option(5.0, "seconds the link is up between two downs", flag="--up", above=0, units="s",
                         maximum=3600)
    name: ClassVar[str] = "flapping-link"
    description: ClassVar[str] = ("flapping link: down (nothing passes, no reset) and up on a schedule between a "
                                  "node and its peers")

    def shape(self) -> dict[str, Any]:
        return {"down_s": self.down_s, "up_s": self.up_s}

    def words(self) -> str:
        return f"take the link down {self.down_s:g}s, up {self.up_s:g}s, over and over (iptables DROP)"


@dataclass
class Latency(_LinkFault):
    """Every packet between a node and its peers held a while, each way (or each way its own)."""

    delay_ms: float = option(20.0, "the delay added to every packet each way, in milliseconds (with "
                                   "--reverse-delay-ms: the node -> peers way only, what the node sends; on EKS: one "
                                   "way, on the node's pod)", above=0,
                             maximum=10_000, flag="--delay-ms")
    jitter_ms: float = option(0.0, "a uniform +- spread around the delay, in milliseconds (at most the delay; with "
                                   "--reverse-jitter-ms: the node -> peers way only)",
                              minimum=0, maximum=10_000, flag="--jitter-ms")
    reverse_delay_ms: float | None = option(None, "the delay of the other way, peers -> node (what the peers, or "
                                                  "with --to-store the store, send the node), in milliseconds, where "
                                                  "it differs from --delay-ms (0: none that way; not on EKS). "
                                                  "Default: --delay-ms, each way alike",
                                            minimum=0, maximum=10_000, flag="--reverse-delay-ms")
    reverse_jitter_ms: float | None = option(None, "the +- spread of the peers -> node way's delay, in milliseconds "
                                                   "(at most that delay; not on EKS). Default: --jitter-ms",
                                             minimum=0, maximum=10_000, flag="--reverse-jitter-ms")
    to_store: bool = option(False, TO_STORE_HELP)
    name: ClassVar[str] = "latency"
    description: ClassVar[str] = ("slow link: every packet between a node and its peers delayed each way (the "
                                  "netfilter queue, held in user space)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.jitter_ms > self.delay_ms:
            raise SpecError(f"--jitter-ms {self.jitter_ms:g} is more than --delay-ms {self.delay_ms:g}: a packet "
                            "cannot leave before it arrived")
        back, back_jitter = self.reverse()
        if back_jitter > back:
            said = (f"--reverse-jitter-ms {back_jitter:g}" if self.reverse_jitter_ms is not None else
                    f"the peers -> node way's jitter ({back_jitter:g}, --jitter-ms's; give --reverse-jitter-ms)")
            raise SpecError(f"{said} is more than the peers -> node way's delay ({back:g} ms): a packet cannot leave "
                            "before it arrived")

    def reverse(self) -> tuple[float, float]:
        """(delay, jitter) of the peers -> node way, in milliseconds (unset: the same as node -> peers)."""
        return (self.delay_ms if self.reverse_delay_ms is None else self.reverse_delay_ms,
                self.jitter_ms if self.reverse_jitter_ms is None else self.reverse_jitter_ms)

    @property
    def per_direction(self) -> bool:
        """Whether the two ways are delayed differently."""
        return self.reverse() != (self.delay_ms, self.jitter_ms)

    @property
    def round_trip_ms(self) -> float:
        """The delay a round trip gains on average: each way's delay, summed."""
        return self.delay_ms + self.reverse()[0]

    @property
    def worst_round_trip_ms(self) -> float:
        """The longest round trip the delay makes: each way's delay plus its jitter, summed."""
        return self.delay_ms + self.jitter_ms + sum(self.reverse())

    def shape(self) -> dict[str, Any]:
        given = {k: v for k, v in (("reverse_delay_ms", self.reverse_delay_ms),
                                   ("reverse_jitter_ms", self.reverse_jitter_ms)) if v is not None}
        return {"delay_ms": self.delay_ms, "jitter_ms": self.jitter_ms, "to_store": self.to_store, **given}

    def words(self) -> str:
        def held(delay: float, jitter: float) -> str:
            return f"{delay:g} ms" + (f" +- {jitter:g} ms" if jitter else "")
        if not self.per_direction:
            return f"hold every packet {held(self.delay_ms, self.jitter_ms)} each way (NFQUEUE and a delay line)"
        peers = "the store" if self.to_store else "peers"
        return (f"hold every packet {held(self.delay_ms, self.jitter_ms)} node -> {peers} and "
                f"{held(*self.reverse())} {peers} -> node (NFQUEUE and a delay line per receiving side)")
