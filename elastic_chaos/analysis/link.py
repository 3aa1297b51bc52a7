"""What a degraded link cost a job: the degradation as measured, and the step rate before, during, after.

A lossy, slow or flapping link between ranks kills nothing: the job pays in step time
(retransmits, a capped all-reduce, a collective that waits for the link to come back) or,
when the degradation outlasts a timeout, in a restart. This group puts the two side by side
for ``packet-loss``, ``bandwidth``, ``flapping-link`` and ``latency`` (elastic_chaos.faults.network):
what the probe across the link measured once the fault was applied (its record's
``probe``), the step rate in the window before, while degraded (until the fault's revert)
and in the window after (elastic_chaos.analysis.throughput.step_rate: steps over the time
they took), the longest gap between two steps while degraded (a flap's stall), and the
restarts the job spent (the highest ``restart_count`` a step reported, against before).

Where the delay differs per direction, the probe's one-way delays (node -> peer, peer -> node:
one clock, both ends on this machine) are reported beside the round trip; the store's link,
probed by TCP connects, has only its round trip, and the report says so. A bursty loss adds
what its queue readers dropped over the whole fault (their own count: the loss and the mean
burst, in packets of the link, the job's and the probe's alike).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from elastic_chaos.analysis.groups import FaultMark, fault_group
from elastic_chaos.analysis.metrics import Metric, Unit, declared, metric
from elastic_chaos.analysis.phases import RESTART_SIGNS
from elastic_chaos.analysis.throughput import WINDOW_S, step_rate
from elastic_chaos.events import Event, FaultEv, NodeEv, ProgressEv, RdzvEv, first, last, of

LINK_FAULTS = frozenset({"packet-loss", "bandwidth", "flapping-link", "latency"})


@dataclass
class LinkCost:
    """A degraded link, as measured, and the job's step rate around it (None: not observed)."""

    target: str | None
    injected_at: float
    restored_at: float | None = None
    loss_asked: float | None = metric("loss asked", Unit.FRACTION, "the share of packets the fault drops each way",
                                      junit=True)
    loss_measured: float | None = metric("loss measured", Unit.FRACTION, "the probe's loss each way once the "
                                         "fault was applied (1 - sqrt of its UDP echoes' share that came back)",
                                         table=True, junit=True)
    mbit_asked: float | None = metric("cap asked", Unit.MBIT_S, "the rate cap the fault set each way",
                                      junit=True)
    mbit_measured: float | None = metric("rate measured", Unit.MBIT_S, "the probe's TCP stream across "
                                         "the capped link (the job's own traffic shares it)", table=True, junit=True)
    mbit_baseline: float | None = metric("rate before", Unit.MBIT_S, "the probe's TCP stream across the "
                                         "link before the cap", junit=True)
    delay_ms: float | None = metric("delay asked", Unit.MILLISECONDS, "the delay the fault adds each way (where "
                                    "the ways differ: node -> peers)", junit=True)
    reverse_delay_ms: float | None = metric("delay asked back", Unit.MILLISECONDS, "the delay the fault adds "
                                            "peers -> node, where it was set apart (--reverse-delay-ms)", junit=True)
    rtt_ms: float | None = metric("round trip", Unit.MILLISECONDS, "the probe's median UDP round trip once the "
                                  "fault was applied", table=True, junit=True)
    rtt_baseline_ms: float | None = metric("round trip before", Unit.MILLISECONDS, "the probe's median UDP round "
                                           "trip before the fault", junit=True)
    one_way_ms: float | None = metric("one way measured", Unit.MILLISECONDS, "the probe's median one-way delay "
                                      "node -> peer once the fault was applied (the echo's receipt less the send, "
                                      "on one clock)", junit=True)
    one_way_back_ms: float | None = metric("one way back measured", Unit.MILLISECONDS, "the probe's median "
                                           "one-way delay peer -> node once the fault was applied", junit=True)
    one_way_baseline_ms: float | None = metric("one way before", Unit.MILLISECONDS, "the probe's median one-way "
                                               "delay node -> peer before the fault", junit=True)
    one_way_back_baseline_ms: float | None = metric("one way back before", Unit.MILLISECONDS, "the probe's median "
                                                    "one-way delay peer -> node before the fault", junit=True)
    loss_forward: float | None = metric("loss measured out", Unit.FRACTION, "the share of the probe's datagrams "
                                        "lost node -> peer (those its echo never saw)", junit=True)
    loss_reverse: float | None = metric("loss measured back", Unit.FRACTION, "the share of the datagrams that "
                                        "reached the echo whose echo was lost peer -> node", junit=True)
    burst_asked: float | None = metric("burst asked", Unit.FACTOR, "the mean burst length the fault asked, in "
                                       "packets lost in a row (--burst)", junit=True)
    loss_dropped: float | None = metric("loss as dropped", Unit.FRACTION, "the share of the link's packets the "
                                        "bursty loss's queue readers dropped, from the fault to its revert (their "
                                        "own count, every direction)", junit=True)
    burst_dropped: float | None = metric("mean burst as dropped", Unit.FACTOR, "the mean run of packets the "
                                         "bursty loss's queue readers dropped in a row, from the fault to its "
                                         "revert", junit=True)
    flaps: int | None = metric("flaps", Unit.COUNT, "times the link went down", table=True, junit=True)
    rate_before: float | None = metric("step rate before", Unit.RATE, "steps per second in the window before the "
                                       "fault", table=True, junit=True)
    rate_during: float | None = metric("step rate degraded", Unit.RATE, "steps per second from the fault to its "
                                       "revert", table=True, junit=True)
    rate_after: float | None = metric("step rate after", Unit.RATE, "steps per second in the window after the "
                                      "revert", table=True, junit=True)
    drop: float | None = metric("step-rate drop", Unit.FRACTION, "1 - rate degraded / rate before", table=True,
                                junit=True, failure=True)
    longest_gap_s: float | None = metric("longest step gap", Unit.SECONDS, "the longest time between two steps "
                                         "while the link was degraded (a stall)", table=True, junit=True)
    restarts: int | None = metric("restarts", Unit.COUNT, "restarts the job spent from the fault on (the highest "
                                  "restart_count a step reported, against before)", table=True, junit=True,
                                  failure=True)
    peers: list[str] = field(default_factory=list)
    """The nodes at the other end of the degraded link (the target is at this end)."""
    declared_dead: list[str] = field(default_factory=list)
    """Live nodes the rendezvous dropped while the link was degraded: gone from the participants of the
    completed round they trained in, before any agent restarted its workers (torch's ``_sanitize`` drops a
    node whose heartbeat is older than the keep-alive tolerance; nothing was killed): the false death late
    heartbeats make."""
    rank_pairs: list[tuple[int, int]] = field(default_factory=list)
    """The rank pairs whose traffic crossed the link: each rank the target held before the fault with
    each rank a peer held (the last steps before it); empty where steps do not say (the store's link)."""
    missing: list[str] = field(default_factory=list)
    asked_of: str | None = None
    """Who made the degradation where nothing probed it (``AWS FIS`` on EKS): its values are
    what was asked of it, never measured. None: the toolkit made it and probed the link."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {m.key: _round(getattr(self, m.key)) for m in METRICS}
        out.update({"restored_at": _round(self.restored_at), "peers": list(self.peers),
                    "rank_pairs": [list(p) for p in self.rank_pairs], "declared_dead": list(self.declared_dead),
                    "missing": list(self.missing), "asked_of": self.asked_of})
        return out

    @classmethod
    def from_json(cls, target: str | None, injected_at: float, raw: Mapping[str, Any]) -> LinkCost:
        """report.json's ``link`` block read back (what is absent or not a number: not observed)."""
        values: dict[str, Any] = {m.key: m.unit.read(raw.get(m.key)) for m in METRICS}
        restored = Unit.SECONDS.read(raw.get("restored_at"))
        return cls(target, injected_at, restored_at=None if restored is None else float(restored),
                   peers=[str(p) for p in raw.get("peers") or [] if isinstance(p, str)],
                   declared_dead=[str(n) for n in raw.get("declared_dead") or [] if isinstance(n, str)],
                   rank_pairs=[(int(a), int(b)) for a, b in (p for p in raw.get("rank_pairs") or []
                                                             if isinstance(p, list) and len(p) == 2)
                               if isinstance(a, int) and isinstance(b, int)],
                   missing=[str(m) for m in raw.get("missing") or [] if isinstance(m, str)],
                   asked_of=raw["asked_of"] if isinstance(raw.get("asked_of"), str) else None, **values)

    def step_times(self) -> str:
        """Mean step time before, degraded, after, in milliseconds (1 / step rate)."""
        parts = [f"{1000 / r:.0f} ms" if r else "?" for r in (self.rate_before, self.rate_during, self.rate_after)]
        return f"step time {parts[0]} before, {parts[1]} degraded, {parts[2]} after"

    def describe(self) -> str:
        """One line: what was measured across the link, and what the job paid."""
        fmt = {m.key: m.format(getattr(self, m.key)) for m in METRICS}
        applied = []
        if self.asked_of is not None:    # nothing probed the link: the values are asked, never measured
            wanted = [f"loss {fmt['loss_asked']}" if self.loss_asked is not None else "",
                      f"delay {fmt['delay_ms']}" if self.delay_ms is not None else ""]
            applied.append(f"{' and '.join(w for w in wanted if w) or 'a degradation'} asked of {self.asked_of}, "
                           "not measured")
        if self.loss_measured is not None:
            asked = f" (asked {fmt['loss_asked']})" if self.loss_asked is not None else ""
            if self.burst_asked is not None:
                asked = f" (asked {fmt['loss_asked']} in bursts of {self.burst_asked:g} packets)"
            ways = (f": {_pct1(self.loss_forward)} out, {_pct1(self.loss_reverse)} back"
                    if self.burst_asked is not None and self.loss_forward is not None else "")
            applied.append(f"loss {fmt['loss_measured']} each way measured{ways}{asked}")
        if self.loss_dropped is not None:
            burst = f" in bursts of {self.burst_dropped:.1f} packets on average" if self.burst_dropped else ""
            applied.append(f"{_pct1(self.loss_dropped)} of the link's packets dropped{burst} (the queue readers' "
                           "count)")
        if self.mbit_measured is not None:
            applied.append(f"{fmt['mbit_measured']} measured (cap {fmt['mbit_asked']}, {fmt['mbit_baseline']} before)")
        if self.delay_ms is not None and self.asked_of is None and self.reverse_delay_ms is None:
            applied.append(f"round trip {fmt['rtt_ms']} measured ({fmt['delay_ms']} each way asked, "
                           f"{fmt['rtt_baseline_ms']} before)")
        elif self.delay_ms is not None and self.asked_of is None:
            applied.append(f"round trip {fmt['rtt_ms']} measured ({fmt['delay_ms']} out + "
                           f"{fmt['reverse_delay_ms']} back asked, {fmt['rtt_baseline_ms']} before)")
            if self.one_way_ms is not None and self.one_way_back_ms is not None:
                applied.append(f"one way {fmt['one_way_ms']} out and {fmt['one_way_back_ms']} back measured "
                               f"({fmt['one_way_baseline_ms']} and {fmt['one_way_back_baseline_ms']} before)")
            else:
                applied.append("each way not measured apart (the probe measured only the round trip)")
        if self.flaps is not None:
            applied.append(f"{self.flaps} flap(s)")
        link = f"{self.target} <-> {', '.join(self.peers) or '?'}"
        if self.reverse_delay_ms is not None or self.burst_asked is not None:
            link += f" (out: {self.target} -> {', '.join(self.peers) or '?'}; back: the other way)"
        if self.rank_pairs:
            link += f" (rank pairs {', '.join(f'{a}-{b}' for a, b in self.rank_pairs)})"
        dead = f", declared dead while alive: {', '.join(self.declared_dead)}" if self.declared_dead else ""
        return (f"{link}: {'; '.join(applied) or 'degradation not measured'}: {self.step_times()} (a drop of "
                f"{fmt['drop']}), longest step gap {fmt['longest_gap_s']}, {fmt['restarts']} restart(s){dead}")


METRICS: tuple[Metric, ...] = declared(LinkCost)


def _pct1(v: float | None) -> str:
    return "?" if v is None else f"{v:.1%}"


def _round(v: Any) -> Any:
    return round(float(v), 4) if isinstance(v, float) else v


def _num(raw: Any, key: str) -> float | None:
    v = raw.get(key) if isinstance(raw, Mapping) else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def link_cost(events: Sequence[Event], *, target: str | None, injected_at: float, fault: str,
              detail: Mapping[str, Any], window_s: float = WINDOW_S) -> LinkCost:
    """The LinkCost of the ``fault`` on ``target``'s link at ``injected_at`` (``detail``: its
    record's, with the probe)."""
    events = sorted(events, key=lambda e: e.t)
    steps = of(events, ProgressEv.STEP)
    peers = ["the rendezvous store"] if detail.get("to_store") is True else detail.get("peers")
    out = LinkCost(target, injected_at, peers=[str(p) for p in peers] if isinstance(peers, list) else [])
    if detail.get("to_store") is not True:
        out.rank_pairs = rank_pairs(steps, target, out.peers, injected_at)
    probe, baseline = detail.get("probe"), detail.get("baseline")
    out.loss_asked = _num(detail, "loss")
    out.loss_measured = _num(probe, "loss_each_way") if fault != "bandwidth" else None
    kbit = _num(detail, "rate_kbit")
    out.mbit_asked = None if kbit is None else kbit / 1000
    measured, before = _num(probe, "kbit_s"), _num(baseline, "kbit_s")
    out.mbit_measured = None if measured is None else measured / 1000
    out.mbit_baseline = None if before is None else before / 1000
    out.rtt_ms = _num(probe, "rtt_ms")
    out.rtt_baseline_ms = _num(baseline, "rtt_ms")
    out.delay_ms = _num(detail, "delay_ms")
    out.reverse_delay_ms = _num(detail, "reverse_delay_ms")
    if out.reverse_delay_ms is None and _num(detail, "reverse_jitter_ms") is not None:
        out.reverse_delay_ms = out.delay_ms     # the jitter alone set apart: the delay is the same back
    if out.reverse_delay_ms is not None or _num(detail, "burst") is not None:
        out.one_way_ms, out.one_way_back_ms = _num(probe, "forward_ms"), _num(probe, "reverse_ms")
        out.one_way_baseline_ms = _num(baseline, "forward_ms")
        out.one_way_back_baseline_ms = _num(baseline, "reverse_ms")
        out.loss_forward, out.loss_reverse = _num(probe, "loss_forward"), _num(probe, "loss_reverse")
    out.burst_asked = _num(detail, "burst")
    asked_of = detail.get("asked_of")
    out.asked_of = asked_of if isinstance(asked_of, str) else None
    restored = first(events, FaultEv.REVERTED, node=target, after=injected_at,
                     where=lambda e: e.data.fault == fault)
    end = events[-1].t if events else injected_at
    out.restored_at = restored.t if restored is not None else None
    until = out.restored_at if out.restored_at is not None else end
    if out.restored_at is None:
        out.missing.append("the link was not restored: 'degraded' runs to the end")
    else:
        if fault == "flapping-link":
            out.flaps = _flaps([e for e in events if e.type == NodeEv.LINK_RESTORED and e.node == target
                                and e.t >= injected_at])
    if out.burst_asked is not None:
        restored_drops = next((e.data.extra.get("drops") for e in events if e.type == NodeEv.LINK_RESTORED
                               and e.node == target and e.t >= injected_at
                               and isinstance(e.data.extra.get("drops"), list)), None)
        out.loss_dropped, out.burst_dropped = _dropped(restored_drops if restored_drops is not None
                                                       else detail.get("drops"))
    out.rate_before = step_rate(steps, injected_at - window_s, injected_at)
    out.rate_during = step_rate(steps, injected_at, until)
    if out.restored_at is not None:
        out.rate_after = step_rate(steps, out.restored_at, min(end, out.restored_at + window_s))
    if out.rate_before and out.rate_during is not None:
        out.drop = 1.0 - out.rate_during / out.rate_before
    for what, v in (("before the fault", out.rate_before), ("while degraded", out.rate_during)):
        if v is None:
            out.missing.append(f"fewer than two steps {what}: no step rate")
    out.declared_dead = declared_dead(events, injected_at, until)
    out.longest_gap_s = _longest_gap(steps, injected_at, until)
    out.restarts = _restarts(steps, injected_at)
    return out


def rank_pairs(steps: Sequence[Event], target: str | None, peers: Sequence[str],
               injected_at: float) -> list[tuple[int, int]]:
    """Each rank ``target`` held with each rank a peer held, in the last world before ``injected_at``
    (each node's steps of its newest restart count then): the pairs whose traffic the link carried."""
    newest: dict[str, int] = {}   # each node's own agent counts its restarts: its newest world is its own
    for e in steps:
        if e.t < injected_at and e.node is not None:
            newest[e.node] = max(newest.get(e.node, 0), e.data.restart_count or 0)
    ranks: dict[str, set[int]] = {}
    for e in steps:
        if e.t < injected_at and e.node is not None and e.data.rank is not None \
                and (e.data.restart_count or 0) == newest[e.node]:
            ranks.setdefault(e.node, set()).add(int(e.data.rank))
    mine = sorted(ranks.get(target or "", ()))
    theirs = sorted({r for peer in peers for r in ranks.get(peer, ())})
    return [(a, b) for a in mine for b in theirs]


def declared_dead(events: Sequence[Event], injected_at: float, until: float) -> list[str]:
    """The nodes that left the participants of the completed round they were in at ``injected_at``
    before ``until``, while that round stood (the same round number) and before any agent restarted
    its workers: a participant then leaves a completed round only when torch drops it for a stale
    heartbeat (an agent that restarts, or leaves on SIGTERM, removes itself; a link fault kills
    nothing). A new round, where every node joins afresh, is not read."""
    standing = last(events, RdzvEv.STATE, until=injected_at, where=lambda e: e.data.complete)
    if standing is None:
        return []
    # an agent restarting its workers leaves the round itself to join the next: from the first sign
    # of a restart on, a node gone from the round is no evidence of a death
    restart = first(events, *RESTART_SIGNS, after=injected_at, until=until)
    members, gone = set(standing.data.nodes()), list[str]()
    for e in of(events, RdzvEv.STATE, after=injected_at, until=restart.t if restart is not None else until):
        if e.data.round != standing.data.round:
            break
        gone += sorted(members - set(e.data.nodes()) - set(gone))
    return gone


def _dropped(drops: Any) -> tuple[float | None, float | None]:
    """(the share dropped, the mean burst) over every reader's tally (``drops``: a list of them)."""
    tallies = [t for t in drops if isinstance(t, Mapping)] if isinstance(drops, list) else []
    packets = sum(int(_num(t, "packets") or 0) for t in tallies)
    dropped = sum(int(_num(t, "dropped") or 0) for t in tallies)
    bursts = sum(int(_num(t, "bursts") or 0) for t in tallies)
    return (dropped / packets if packets else None, dropped / bursts if bursts else None)


def _flaps(restored: list[Event]) -> int | None:
    """How many times the link went down: the down windows its restore reported."""
    for e in restored:
        got = e.data.extra.get("flaps")
        if isinstance(got, list):
            return len(got)
    return None


def _longest_gap(steps: Sequence[Event], start: float, end: float) -> float | None:
    times = sorted({e.t for e in steps if start <= e.t <= end})
    if not times:
        return None
    edges = [start, *times]
    return max(b - a for a, b in zip(edges, edges[1:], strict=False))


def _restarts(steps: Sequence[Event], injected_at: float) -> int | None:
    def most(evs: list[Event]) -> int | None:
        counts = [e.data.restart_count for e in evs if e.data.restart_count is not None]
        return max(counts) if counts else None
    before = most([e for e in steps if e.t < injected_at])
    after = most([e for e in steps if e.t >= injected_at])
    if before is None or after is None:
        return None
    return max(0, after - before)


def _measure(events: Sequence[Event], mark: FaultMark) -> LinkCost:
    return link_cost(events, target=mark.target, injected_at=mark.injected_at, fault=mark.fault, detail=mark.detail)


LINK = fault_group(
    "link", "Step rate while a link was degraded", LinkCost, faults=LINK_FAULTS, prom="link",
    instead_of=("recovery",), measure=_measure,
    read=lambda mark, raw: LinkCost.from_json(mark.target, mark.injected_at, dict(raw)))
"""A degraded link's cost (report.json's ``link``): nothing died, so its row replaces the
recovery row in the tables."""
