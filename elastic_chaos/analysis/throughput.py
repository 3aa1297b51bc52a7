"""What a slow node costs a job: its step rate before, during and after, and whom it waited for.

A synchronous job steps at the pace of its slowest rank: every other rank
waits for it in the gradient all-reduce. So a node at half speed halves the
job's step rate, and the job's own step times alone cannot say which rank was
slow (every rank completes each step at the same instant). What can: the
reference trainer reports with each step ``sync_s``, the time it spent in
forward, backward (DDP's all-reduce: waiting for peers) and the optimizer.
A rank's *own* time per step is its step interval minus ``sync_s``: the slow
rank spends its step in its own work, the others in the all-reduce waiting
for it. The rank with the largest own time is the one the job waited for.

The rate of a window is the steps completed in it over the time they took:
(last step - first step) / (time of the last - time of the first), with each
step timed when its first rank completed it. Each metric is declared once
(elastic_chaos.analysis.metrics): report.json's ``throughput`` block, the metrics file
and the verdict's words derive from the declarations.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from elastic_chaos.analysis.groups import FaultMark, fault_group
from elastic_chaos.analysis.metrics import Metric, Unit, declared, metric
from elastic_chaos.events import Event, FaultEv, ProgressEv, first, of

_R, _F, _S, _N = Unit.RATE, Unit.FRACTION, Unit.SECONDS, Unit.COUNT

WINDOW_S = 10.0
"""Seconds of training measured before the slowdown, and after it."""


@dataclass(frozen=True)
class RankPace:
    """One rank's mean step while the node was slow (and before)."""

    node: str | None
    rank: int
    steps: int
    own_s: float
    """Mean step interval minus the time in forward/backward/all-reduce: its own work."""
    sync_s: float
    """Mean time in forward/backward/all-reduce (waiting for slower peers included)."""

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RankPace:
        node = raw.get("node")
        return cls(None if node is None else str(node), int(Unit.COUNT.read(raw.get("rank")) or 0),
                   int(Unit.COUNT.read(raw.get("steps")) or 0), float(Unit.SECONDS.read(raw.get("own_s")) or 0.0),
                   float(Unit.SECONDS.read(raw.get("sync_s")) or 0.0))

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "rank": self.rank, "steps": self.steps, "own_s": round(self.own_s, 4),
                "sync_s": round(self.sync_s, 4)}


@dataclass
class Throughput:
    """The job's step rate around one slowdown (None: not observed; ``missing`` says why)."""

    target: str | None
    injected_at: float
    restored_at: float | None = None
    factor: float | None = metric("slowed by", Unit.FACTOR, "how many times slower the node ran (its duty "
                                  "cycle)", table=True, junit=True)
    rate_before: float | None = metric("step rate before", _R, "steps per second in the window before the "
                                       "node was slowed", table=True, junit=True)
    rate_during: float | None = metric("step rate while slow", _R, "steps per second from the slowdown to the "
                                       "node's return to full speed", table=True, junit=True)
    rate_after: float | None = metric("step rate after", _R, "steps per second in the window after the node "
                                      "ran at full speed again", table=True, junit=True)
    drop: float | None = metric("step-rate drop", _F, "1 - rate while slow / rate before: the share of the "
                                "job's throughput lost while one node was slow", table=True, junit=True,
                                failure=True)
    expected_drop: float | None = metric("expected drop", _F, "1 - 1/factor: what a synchronous job loses "
                                         "when one node runs factor times slower", junit=True)
    slow_rank: int | None = metric("slowest rank", _N, "the rank the others waited for while the node was "
                                   "slow (the largest own time per step)", table=True, junit=True)
    slow_own_before_s: float | None = metric("its own time before", _S, "the slowest rank's mean own time "
                                             "per step before the slowdown", junit=True)
    slow_own_during_s: float | None = metric("its own time while slow", _S, "the slowest rank's mean own "
                                             "time per step while its node was slow", junit=True)
    slow_node: str | None = None
    ranks: list[RankPace] = field(default_factory=list)
    """Every rank's pace while the node was slow, slowest first."""
    missing: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {m.key: _round(getattr(self, m.key)) for m in METRICS}
        out.update({"restored_at": _round(self.restored_at), "slow_node": self.slow_node,
                    "ranks": [r.to_json() for r in self.ranks], "missing": list(self.missing)})
        return out

    @classmethod
    def from_json(cls, target: str | None, injected_at: float, raw: dict[str, Any]) -> Throughput:
        """report.json's ``throughput`` block read back (what is absent or not a number: not observed)."""
        values: dict[str, Any] = {m.key: m.unit.read(raw.get(m.key)) for m in METRICS}
        restored = Unit.SECONDS.read(raw.get("restored_at"))
        node = raw.get("slow_node")
        return cls(target, injected_at, restored_at=None if restored is None else float(restored),
                   slow_node=None if node is None else str(node),
                   ranks=[RankPace.from_json(r) for r in raw.get("ranks") or [] if isinstance(r, dict)],
                   missing=[str(m) for m in raw.get("missing") or [] if isinstance(m, str)], **values)

    def describe(self) -> str:
        """One line: the rates, the drop and whom the job waited for."""
        fmt = {m.key: m.format(getattr(self, m.key)) for m in METRICS}
        who = (f"; it waited for rank {self.slow_rank} on {self.slow_node} (own time per step "
               f"{fmt['slow_own_before_s']} -> {fmt['slow_own_during_s']})" if self.slow_rank is not None else "")
        return (f"step rate {fmt['rate_before']} before, {fmt['rate_during']} while {self.target} ran "
                f"{self.factor or '?'}x slower, {fmt['rate_after']} after: a drop of {fmt['drop']} "
                f"(a synchronous job: {fmt['expected_drop']}){who}")


METRICS: tuple[Metric, ...] = declared(Throughput)
"""The throughput metrics, in declaration order."""


def _round(v: Any) -> Any:
    return round(float(v), 4) if isinstance(v, float) else v


def step_rate(steps: Sequence[Event], start: float, end: float) -> float | None:
    """Steps per second completed in [start, end] (each step timed at its first rank's
    report); None with fewer than two distinct steps there."""
    firsts: dict[int, float] = {}
    for e in steps:
        if start <= e.t <= end:
            n = e.data.step
            firsts[n] = min(e.t, firsts.get(n, e.t))
    if len(firsts) < 2:
        return None
    lo, hi = min(firsts), max(firsts)
    span = firsts[hi] - firsts[lo]
    return (hi - lo) / span if span > 0 else None


def rank_paces(steps: Sequence[Event], start: float, end: float) -> list[RankPace]:
    """Each rank's mean own and sync time per step in [start, end], slowest first; only
    ranks whose steps carry ``sync_s`` (the reference trainer's)."""
    series: dict[tuple[Any, ...], list[Event]] = {}
    for e in steps:
        series.setdefault((e.node, e.data.rank or 0, e.data.pid), []).append(e)
    paces = []
    for (node, rank, _pid), evs in series.items():
        own, sync = [], []
        for a, b in zip(evs, evs[1:], strict=False):
            s = b.data.sync_s
            if start <= a.t and b.t <= end and s is not None:
                own.append(max(0.0, b.t - a.t - s))
                sync.append(s)
        if own:
            paces.append(RankPace(node, rank, len(own), sum(own) / len(own), sum(sync) / len(sync)))
    return sorted(paces, key=lambda p: -p.own_s)


def throughput(events: Sequence[Event], *, target: str | None, injected_at: float, factor: float | None,
               fault: str | None = None, window_s: float = WINDOW_S) -> Throughput:
    """The Throughput of the slowdown of ``target`` at ``injected_at``: ``window_s`` before it,
    until the slowing ``fault``'s revert (else the end of the evidence), ``window_s`` after."""
    events = sorted(events, key=lambda e: e.t)
    steps = of(events, ProgressEv.STEP)
    out = Throughput(target, injected_at, factor=factor)
    restored = first(events, FaultEv.REVERTED, node=target, after=injected_at,
                     where=lambda e: fault is None or e.data.fault == fault)
    end = events[-1].t if events else injected_at
    out.restored_at = restored.t if restored is not None else None
    until = out.restored_at if out.restored_at is not None else end
    if out.restored_at is None:
        out.missing.append("the node was not restored to full speed: 'while slow' runs to the end")
    out.rate_before = _rate(steps, injected_at - window_s, injected_at, "before the slowdown", out)
    out.rate_during = _rate(steps, injected_at, until, "while the node was slow", out)
    if out.restored_at is not None:
        out.rate_after = _rate(steps, out.restored_at, min(end, out.restored_at + window_s), "after it", out)
    if out.rate_before and out.rate_during is not None:
        out.drop = 1.0 - out.rate_during / out.rate_before
    if factor:
        out.expected_drop = 1.0 - 1.0 / factor
    _attribute(out, steps, injected_at - window_s, injected_at, until)
    return out


def _rate(steps: Sequence[Event], start: float, end: float, what: str, out: Throughput) -> float | None:
    rate = step_rate(steps, start, end)
    if rate is None:
        out.missing.append(f"fewer than two steps {what}: no step rate")
    return rate


def _attribute(out: Throughput, steps: Sequence[Event], before: float, injected_at: float, until: float) -> None:
    """Which rank the job waited for while the node was slow, from the ranks' own times."""
    during = rank_paces(steps, injected_at, until)
    if not during:
        out.missing.append("no step carries sync_s (time in forward/backward/all-reduce): in a synchronous "
                           "job every rank's step time is the same, so which rank was slow is not known")
        return
    out.ranks = during
    slow = during[0]
    out.slow_rank, out.slow_node, out.slow_own_during_s = slow.rank, slow.node, slow.own_s
    earlier = [p for p in rank_paces(steps, before, injected_at) if (p.node, p.rank) == (slow.node, slow.rank)]
    out.slow_own_before_s = earlier[0].own_s if earlier else None


def _measure(events: Sequence[Event], mark: FaultMark) -> Throughput:
    factor = mark.detail.get("factor")
    return throughput(events, target=mark.target, injected_at=mark.injected_at, fault=mark.fault,
                      factor=float(factor) if isinstance(factor, (int, float)) and not isinstance(factor, bool)
                      else None)


THROUGHPUT = fault_group(
    "throughput", "Step rate while a node was slow", Throughput, faults={"straggler"}, prom="straggler",
    instead_of=("recovery",), measure=_measure,
    read=lambda mark, raw: Throughput.from_json(mark.target, mark.injected_at, dict(raw)))
"""A slow node's cost in step rate (report.json's ``throughput``): a slow node is no failure to
recover from, so its row replaces the recovery row in the tables."""

