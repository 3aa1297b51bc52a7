"""What a replayed preemption trace cost a job: its preemptions as replayed, and its goodput.

A replay (elastic_chaos.hypotheses.replay) records its trace and parameters in the
``replay`` phase event and each preemption's fate in a ``fault/replayed``
event. :data:`REPLAY` (a run group: elastic_chaos.analysis.groups) reads them back
into report.json's ``replay`` block, with the answer to the question a replay
asks: what this trace costs this job, with its checkpoint interval, in goodput
over the replay:

    goodput = (last step - the step at the replay's start) x s / (end - start)

with *s* the steady step time before the replay (the median gap of rank 0's
steps) and *end* the last step seen by the time the replay was over (the
``replay-over`` phase: its verdict and report.json read the same window; a run
that crashed before it: the last step seen): progress re-trained after a
preemption counts once, downtime and replays lower it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from elastic_chaos.analysis.goodput import goodput
from elastic_chaos.analysis.groups import run_group
from elastic_chaos.analysis.metrics import Metric, Unit, declared, metric
from elastic_chaos.events import Event, FaultEv, RunnerEv, last, of, payload_json
from elastic_chaos.events.fault_events import Replayed

REPLAY_OVER = "replay-over"
"""The runner phase that ends a replay's goodput window."""


@dataclass(frozen=True)
class Preemption:
    """One preemption of the trace as replayed: the ``fault/replayed`` event and the node it hit."""

    node: str | None
    replayed: Replayed

    def to_json(self) -> dict[str, Any]:
        return {**payload_json(self.replayed), "node": self.node}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Preemption:
        node = raw.get("node")
        return cls(None if node is None else str(node), Replayed.read({k: v for k, v in raw.items() if k != "node"}))


@dataclass
class ReplaySummary:
    """A replayed trace: where it came from, how it was replayed, and what it cost."""

    trace: Mapping[str, Any] | None = None
    """The trace's file and digest, or its generator and parameters."""
    by: str | None = None
    """How preemptions were mapped onto nodes (node or group)."""
    started_at: float | None = None
    preemptions: int | None = metric("preemptions", Unit.COUNT, "preemptions in the trace", table=True)
    injected: int | None = metric("injected", Unit.COUNT, "preemptions injected when they came due", table=True,
                                  junit=True)
    skipped: int | None = metric("skipped", Unit.COUNT, "preemptions skipped (the job was at its minimum size, "
                                 "or the slot's node was already gone)", table=True, junit=True)
    compress: float | None = metric("compression", Unit.FACTOR, "trace seconds per second here", table=True)
    max_late_s: float | None = metric("latest", Unit.SECONDS, "the latest a preemption hit after its compressed "
                                      "offset", table=True, junit=True)
    checkpoint_every: int | None = metric("checkpoint every", Unit.STEPS, "the job's checkpoint interval during "
                                          "the replay", table=True)
    goodput: float | None = metric("goodput", Unit.FRACTION, "goodput over the replay: what the trace left of "
                                   "the job's training time", table=True, audit=True, junit=True, failure=True)
    rows: tuple[Preemption, ...] = ()
    missing: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"trace": self.trace, "compress": self.compress, "by": self.by,
                "started_at": None if self.started_at is None else round(self.started_at, 3),
                "preemptions": self.preemptions, "injected": self.injected, "skipped": self.skipped,
                "max_late_s": self.max_late_s, "checkpoint_every": self.checkpoint_every, "goodput": self.goodput,
                "rows": [r.to_json() for r in self.rows]}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReplaySummary:
        values: dict[str, Any] = {m.key: m.unit.read(raw.get(m.key)) for m in METRICS}
        trace, by, started = raw.get("trace"), raw.get("by"), Unit.SECONDS.read(raw.get("started_at"))
        return cls(trace=trace if isinstance(trace, Mapping) else None, by=None if by is None else str(by),
                   started_at=None if started is None else float(started),
                   rows=tuple(Preemption.from_json(r) for r in raw.get("rows") or [] if isinstance(r, Mapping)),
                   **values)

    def title(self) -> str:
        """One line: the trace, how it was replayed, and its cost."""
        trace = self.trace or {}
        where = trace.get("file") or f"generated {trace.get('generator', '')} " + " ".join(
            f"{k}={v}" for k, v in trace.items() if k != "generator")
        goodput = f"{self.goodput:.2f}" if self.goodput is not None else "unknown"
        return (f"replayed trace: {where} (compress {self.compress}, by {self.by}): {self.injected} injected, "
                f"{self.skipped} skipped; goodput over the replay {goodput}, a checkpoint every "
                f"{self.checkpoint_every} steps")

    def table(self) -> list[list[str]]:
        """A header and one row per preemption: when it was due, how late it hit, what it hit."""
        if not self.rows:
            return []
        start = self.started_at or 0.0
        out = [["#", "trace offset", "due", "late", "hit", "trace node", "trace group"]]
        for p in self.rows:
            r = p.replayed
            hit = p.node if r.outcome == "injected" else f"skipped: {r.reason or ''}"
            out.append([str(r.index if r.index is not None else ""), f"{r.offset_s or 0:g}s",
                        f"+{r.due_at - start:.1f}s" if r.due_at is not None else "-",
                        f"{r.late_s:+.2f}s" if r.late_s is not None else "-", str(hit),
                        r.trace_node or "-", r.trace_group or "-"])
        return out


METRICS: tuple[Metric, ...] = declared(ReplaySummary)


def replay_summary(events: Sequence[Event], checkpoint_every: int | None = None) -> ReplaySummary | None:
    """report.json's ``replay`` block from a timeline; None when the run replayed no trace."""
    started = last(events, RunnerEv.PHASE, where=lambda e: e.data.phase == "replay")
    if started is None:
        return None
    rows = tuple(Preemption(e.node, e.data) for e in of(events, FaultEv.REPLAYED))
    injected = [p.replayed for p in rows if p.replayed.outcome == "injected"]
    late = [abs(r.late_s) for r in injected if r.late_s is not None]
    return ReplaySummary(trace=started.data.trace, compress=started.data.compress, by=started.data.by,
                         started_at=started.t, preemptions=started.data.preemptions, injected=len(injected),
                         skipped=len(rows) - len(injected), max_late_s=round(max(late), 3) if late else None,
                         checkpoint_every=checkpoint_every, goodput=replay_goodput(events, started.t), rows=rows)


def replay_goodput(events: Sequence[Event], start: float) -> float | None:
    """Goodput from ``start`` to the end of the replay (elastic_chaos.analysis.goodput: the one formula); None
    without steps on both sides of ``start``."""
    over = last(events, RunnerEv.PHASE, where=lambda e: e.data.phase == REPLAY_OVER and e.t > start)
    upto = [e for e in events if over is None or e.t <= over.t]
    gp = goodput(upto, start=start, end=over.t if over is not None else None)
    return None if gp is None else round(gp, 4)


REPLAY = run_group("replay", "Replayed trace", ReplaySummary,
                   measure=lambda events, mark: replay_summary(events, mark.checkpoint_every),
                   read=ReplaySummary.from_json)
"""A replayed trace's cost (report.json's ``replay``; Prometheus ``elastic_chaos_replay_*``)."""
