"""The ``replay`` hypothesis: preemptions at the times a trace gives, and what they cost.

A trace (elastic_chaos.faults.trace: a CSV a user exports from their cluster's
interruption events, or generated correlated bursts) is replayed onto the job
after steady state, its time compressed by ``--compress``: each preemption is
a hard node loss (``kill-node``) of the job node its trace node or group maps
to, injected when it comes due. The node pool replaces lost nodes as the
autoscaler would. Each preemption is recorded (``fault/replayed``: due,
injected and how late, or skipped and why), and report.json's ``replay``
block answers what the trace cost this job, with its checkpoint interval, in
goodput (elastic_chaos.analysis.replay).

A preemption that comes due while an earlier one's replacement is still on its
way finds the job at its minimum size and is skipped (``--total-loss`` injects
it anyway). Whether that happens depends on how fast the platform replaces a
node (11-12 s locally, a minute or more on a Kubernetes cluster, where a lost
machine's pod is re-created only after the pod garbage collector's quarantine),
not on the toolkit: so a skip is part of the hypothesis, with its evidence. The
``skips-justified`` check holds when every skipped preemption came while an
earlier preemption's replacement had not joined the job yet (its measured
``replacement_s`` is longer than the gap, or it never came); a skip while the
job was whole fails it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic_chaos.analysis.recovery import Recovery
from elastic_chaos.analysis.replay import REPLAY_OVER, replay_goodput
from elastic_chaos.events import FaultEv
from elastic_chaos.events.fault_events import Replayed, Skipped
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.api import pick_victim
from elastic_chaos.faults.trace import Bursts, Replaying, Trace, read_trace
from elastic_chaos.hypotheses.api import Trial, hypothesis
from elastic_chaos.options import option, validate

ON_TIME_S = 1.0
"""How late (or early) a preemption may hit after its compressed offset."""


@dataclass(frozen=True)
class ReplayOptions(Replaying, Bursts):
    """A trace to replay (or the bursts to generate one) and how to map it onto the job.

    The trace is read (or generated) when the options are made, before a run starts: a file
    that cannot be read, or a replay longer than a day at its compression, is a SpecError
    then, not a report folder with a failed verdict."""

    trace: str | None = option(None, "CSV of preemptions to replay (columns time or offset_s, node, group: "
                                     "docs/FAULTS.md), or a bundled example's name: spot-3, k8s-burst; "
                                     "default: a generated trace of correlated bursts",
                               metavar="FILE")
    total_loss: bool = option(False, "inject a preemption even when it leaves fewer than the job's minimum "
                                     "nodes alive (default: skip it and record why)")
    _loaded: Trace | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        Bursts.__post_init__(self)
        validate(self)
        trace = read_trace(Path(self.trace).expanduser()) if self.trace else self.generate()
        self.check_span(trace)
        object.__setattr__(self, "_loaded", trace)

    def load(self) -> Trace:
        """The trace file's preemptions (as read when the options were made), else the generated bursts."""
        assert self._loaded is not None
        return self._loaded


@hypothesis("replay", "preemptions at the times a trace gives (--trace FILE, or generated correlated bursts), "
                      "time-compressed; every recovery and the trace's cost in goodput",
            fault="kill-node", params=ReplayOptions)
def replay(t: Trial) -> None:
    """Replay a preemption trace onto a steady job. Every preemption is injected at its
    compressed offset (within 1 s) or skipped with a reason, each is recovered from
    (or overtaken by the next) losing at most one checkpoint interval, and the trace's
    cost in goodput is reported."""
    p: ReplayOptions = t.params
    trace = p.load()
    t.start()
    t.steady()
    slots = trace.slots(p.replay_by, t.job.max_nodes)
    start = time.time()
    t.run.phase("replay", trace=trace.source, compress=p.compress, by=p.replay_by.value, preemptions=len(trace),
                span_s=round(trace.preemptions[-1].offset_s / p.compress, 3) if len(trace) else 0.0)
    records: list[FaultRecord] = []
    for i, (pre, slot) in enumerate(zip(trace.preemptions, slots, strict=True)):
        due = start + pre.offset_s / p.compress
        _wait_until(t, due)
        row: dict[str, Any] = {"index": i, "offset_s": round(pre.offset_s, 3), "due_at": round(due, 3),
                               "trace_node": pre.node, "trace_group": pre.group, "slot": slot}
        target, why = _aim(t, slot, p.total_loss)
        if target is None:
            t.run.timeline.emit(FaultEv.SKIPPED, None, Skipped(reason=why, replay_index=i))
            t.run.timeline.emit(FaultEv.REPLAYED, None, Replayed.read({**row, "outcome": "skipped", "reason": why}))
            continue
        record = t.inject(t.fault(node=target))
        records.append(record)
        t.run.timeline.emit(FaultEv.REPLAYED, target, Replayed.read(
            {**row, "outcome": "injected", "injected_at": round(record.injected_at, 3),
             "late_s": round(record.injected_at - due, 3)}))
    if records:
        t.recover(records[-1])
    _check(t, trace, start)


def _wait_until(t: Trial, due: float) -> None:
    """Sleep until ``due``, checking every half second that the job is still there."""
    while (left := due - time.time()) > 0:
        time.sleep(min(left, 0.5))
        t.run.ledger.check_alive("the next preemption of the trace")


def slot_nodes(t: Trial) -> dict[str, int]:
    """Each node's slot: the initial nodes in start order, a replacement its predecessor's."""
    slots: dict[str, int] = {}
    for info in t.run.platform.nodes():
        slots[info.name] = slots[info.replaces] if info.replaces in slots else len(set(slots.values()))
    return slots


def _aim(t: Trial, slot: int | None, total_loss: bool) -> tuple[str | None, str]:
    """The node a preemption hits, or None and why it is skipped."""
    alive = [n.name for n in t.run.platform.alive_nodes()]
    if not alive:
        return None, "no node alive"
    if not total_loss and len(alive) <= t.job.min_nodes:
        return None, f"only {len(alive)} node(s) alive, the job's minimum (--total-loss injects it anyway)"
    if slot is None:
        return pick_victim(t.run.platform), ""
    holders = [n for n, s in slot_nodes(t).items() if s == slot and n in alive]
    if not holders:
        return None, f"slot {slot}'s node is gone and its replacement is not up yet"
    return holders[-1], ""


def _check(t: Trial, trace: Trace, start: float) -> None:
    v = t.verdict
    t.run.phase(REPLAY_OVER)   # the goodput window's end, for the verdict and report.json alike
    events = t.run.timeline.events()
    rows: list[Replayed] = [e.data for e in events if e.type == FaultEv.REPLAYED]
    injected = [r for r in rows if r.outcome == "injected"]
    v.require(len(rows) == len(trace), f"every preemption of the trace came due: {len(injected)} injected, "
                                       f"{len(rows) - len(injected)} skipped of {len(trace)}", check="replayed")
    late = [r.late_s for r in injected if r.late_s is not None]
    v.require(all(abs(x) <= ON_TIME_S for x in late),
              f"each hit at its compressed offset (within {ON_TIME_S:g}s; latest {max(late, default=0.0):+.2f}s)",
              check="on-time")
    recs = t.run.recoveries()
    if recs:
        v.require(recs[-1].recovered, "the last preemption was recovered from", check="recovered")
        v.require(all(r.recovered or r.overtaken for r in recs[:-1]),
                  "every other one was recovered from or overtaken by the next", check="recovered-or-overtaken")
        lost = [r.lost_steps for r in recs]
        v.require(all(x is None or x <= t.job.checkpoint_every for x in lost),
                  f"each lost at most {t.job.checkpoint_every} steps ({lost})", check="bounded-loss")
    _check_skips(t, rows, recs)
    goodput = replay_goodput(events, start)
    v.require(goodput is not None, f"the trace cost this job {1 - goodput:.0%} of its training time over the "
                                   f"replay (goodput {goodput:.2f}, a checkpoint every {t.job.checkpoint_every} "
                                   f"steps)" if goodput is not None else "goodput over the replay unknown",
              check="goodput")


def _check_skips(t: Trial, rows: list[Replayed], recs: list[Recovery]) -> None:
    """Every skipped preemption came while an earlier one's replacement was still on its way."""
    skipped = [r for r in rows if r.outcome == "skipped"]
    if not skipped:
        return
    healed = [(f.injected_at, rec.replacement_s) for f, rec in zip(t.run.faults, recs, strict=True)]
    why = [waiting_for(r, healed) for r in skipped]
    v = t.verdict
    v.require(all(w is not None for w in why),
              f"each of the {len(skipped)} skipped preemption(s) came while an earlier one's replacement was not "
              f"back yet: " + "; ".join(w or f"#{r.index} came while the job was whole ({r.reason})"
                                        for r, w in zip(skipped, why, strict=True)), check="skips-justified")


def waiting_for(row: Replayed, healed: list[tuple[float, float | None]]) -> str | None:
    """Why ``row`` (a skipped preemption) found the job short: the earlier preemption whose
    replacement had not joined by the time it came due (``healed``: each injected preemption's
    time and measured replacement_s, None: never replaced); None when there is none."""
    due = row.due_at
    if due is None:
        return None
    for at, took in reversed(healed):
        if at < due and (took is None or at + took > due):
            back = "had no measured replacement" if took is None else f"was replaced {took:.0f} s after it"
            return f"#{row.index} came due {due - at:.0f} s after a preemption whose node {back}"
    return None
