"""Invariants every run must keep, whatever the fault: one job trains as one world.

Split brain: torch's dynamic rendezvous can declare a live node dead (its
heartbeats late by more than keep_alive_interval x keep_alive_max_attempt)
and let a newcomer open a new round without it. The old participant never
looks for newer rounds — its agent only counts waiting nodes — so it keeps
training in its stale world while the new round trains too: two worlds, one
checkpoint directory, each overwriting the other's progress. Measured here
with keep_alive 1 s x 2 under load. It shows on the timeline as two rank-0
worker processes reporting steps at the same time.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from elastic_chaos.events import Event, ProgressEv, of

MIN_OVERLAP_S = 3.0
"""Longer than a graceful hand-over, where an old worker finishes its last step."""


@dataclass(frozen=True)
class SplitBrain:
    start: float
    end: float
    worlds: tuple[tuple[str | None, int, int], ...]
    """(node, pid, world size) of each rank 0 training at the same time."""

    def describe(self) -> str:
        who = ", ".join(f"rank 0 pid {pid} on {node} at world size {ws}" for node, pid, ws in self.worlds)
        return f"split brain for {self.end - self.start:.1f}s: {who} trained at the same time"

    def to_json(self) -> dict[str, Any]:
        return {"start": round(self.start, 3), "end": round(self.end, 3),
                "worlds": [{"node": n, "pid": p, "world_size": w} for n, p, w in self.worlds],
                "description": self.describe()}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> SplitBrain:
        worlds = tuple((w.get("node"), int(w.get("pid", 0)), int(w.get("world_size", 0)))
                       for w in raw.get("worlds") or [] if isinstance(w, dict))
        return cls(float(raw.get("start", 0.0)), float(raw.get("end", 0.0)), worlds)


def split_brains(events: Sequence[Event]) -> list[SplitBrain]:
    """Periods of more than MIN_OVERLAP_S when two rank-0 processes reported steps."""
    # (node, pid, incarnation) -> [first t, last t, node, world size, steps]: a process is its node,
    # its PID and its own start (pods number their processes in their own PID namespaces, so two
    # pods' rank 0 may share a PID, and a re-created pod's worker often has its predecessor's: the
    # two lives of that PID are two processes, or one would seem to span the other's absence)
    spans: dict[tuple[str | None, int, int], list[Any]] = {}
    lives: dict[tuple[str | None, int], int] = {}
    for e in of(events, ProgressEv.START, ProgressEv.STEP):
        pid = e.data.pid
        if pid is None:
            continue
        who = (e.node, int(pid))
        if e.type == ProgressEv.START:     # the first start is life 0, as are steps before any start
            lives[who] = lives.get(who, -1) + 1
            continue
        if (e.data.rank or 0) != 0:
            continue
        span = spans.setdefault((*who, lives.get(who, 0)), [e.t, e.t, e.node, e.data.world_size or 0, 0])
        span[1] = e.t
        span[4] += 1
    found: list[SplitBrain] = []
    items = sorted(spans.items(), key=lambda kv: kv[1][0])
    for i, ((_, pid_a, _), a) in enumerate(items):
        for (_, pid_b, _), b in items[i + 1:]:
            start, end = max(a[0], b[0]), min(a[1], b[1])
            if end - start > MIN_OVERLAP_S and a[4] > 2 and b[4] > 2:
                found.append(SplitBrain(start, end, ((a[2], pid_a, a[3]), (b[2], pid_b, b[3]))))
    return found
