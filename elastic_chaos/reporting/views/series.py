"""What the timeline picture draws, extracted from the events once.

Both renderers (the inline SVG of report.html and matplotlib's timeline.png)
draw the same things: training step vs time per worker process (a restarted
worker is a new line), node lifetimes, fault markers, completed rendezvous
rounds and world size. Unknown event kinds are kept as generic markers, so a
new fault family shows up without a renderer change.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from elastic_chaos.analysis.goodput import step_time_s
from elastic_chaos.events import (
    AgentEv,
    CheckpointEv,
    Event,
    FaultEv,
    NodeEv,
    ProgressEv,
    RdzvEv,
    RunnerEv,
    Source,
    field_value,
    first,
    of,
    payload_json,
)


@dataclass(frozen=True)
class StepSeries:
    """The steps one worker process completed: one line in the picture."""

    node: str
    rank: int
    pid: int | None
    points: tuple[tuple[float, int], ...]

    @property
    def label(self) -> str:
        return f"{self.node} rank {self.rank}" + (f" (pid {self.pid})" if self.pid else "")


@dataclass(frozen=True)
class Round:
    t: float
    round: int | None
    nodes: tuple[str, ...]
    size: int | None
    source: str
    """``etcd`` (the rendezvous watcher) or ``agent`` (torchrun's own log lines)."""


@dataclass(frozen=True)
class Lifetime:
    node: str
    start: float
    end: float
    ended: str
    """``lost`` (a fault), ``exited`` (on its own), ``stopped`` (end of run) or ``running``."""
    replaces: str | None = None


@dataclass(frozen=True)
class Marker:
    """A fault-source event: ``injected`` ones are the faults, others (reverted,
    notice, ...) are drawn as small marks with the event's name."""

    t: float
    event: str
    """The fault event's name (``injected``, ``reverted``, ...)."""
    fault: str
    node: str | None
    detail: str


@dataclass
class Series:
    steps: list[StepSeries] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)
    lifetimes: list[Lifetime] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    node_marks: list[Marker] = field(default_factory=list)
    """Other node events (a spot notice, ...), drawn on the node's lane."""
    world_size: list[tuple[float, int]] = field(default_factory=list)
    """The world size training ran at, where it changed (only while it trained)."""
    pauses: list[tuple[float, float]] = field(default_factory=list)
    """(start, end) of each pause in training: no step for longer than max(2 s, 10 steady steps).
    The world size then is not 0: the job is between two worlds (detecting, re-forming, restarting)."""
    checkpoints: list[tuple[float, int, str]] = field(default_factory=list)
    steady_step_s: float | None = None

    @property
    def nodes(self) -> list[str]:
        names: list[str] = []
        for item in [*(lt.node for lt in self.lifetimes), *(s.node for s in self.steps)]:
            if item not in names:
                names.append(item)
        return names

    @property
    def max_step(self) -> int:
        return max((p[1] for s in self.steps for p in s.points), default=0)


def extract(events: list[Event], t_end: float) -> Series:
    out = Series()
    out.steps = _steps(events)
    out.steady_step_s = step_time_s(events)
    out.rounds = _rounds(events)
    out.lifetimes = _lifetimes(events, t_end)
    out.markers = [_marker(e) for e in of(events, Source.FAULT) if e.type != FaultEv.PLANNED]
    out.node_marks = [_marker(e) for e in of(events, Source.NODE) if e.node is not None
                      and e.type not in (NodeEv.STARTED, NodeEv.LOST, NodeEv.EXITED)]
    out.world_size, out.pauses = _world_size(events, out.steady_step_s)
    out.checkpoints = _checkpoints(events)
    return out


def _int(v: Any, default: int = 0) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _steps(events: list[Event]) -> list[StepSeries]:
    by_proc: dict[tuple[str, int, int | None], list[tuple[float, int]]] = {}
    for e in of(events, ProgressEv.STEP):
        key = (e.node or "?", e.data.rank or 0, e.data.pid)
        by_proc.setdefault(key, []).append((e.t, e.data.step))
    return [StepSeries(node=k[0], rank=k[1], pid=k[2], points=tuple(v))
            for k, v in sorted(by_proc.items(), key=lambda kv: kv[1][0][0])]


def _rounds(events: list[Event]) -> list[Round]:
    etcd = [Round(t=e.t, round=e.data.round if e.data.round is not None else -1, nodes=e.data.nodes(),
                  size=len(e.data.participants), source="etcd")
            for e in of(events, RdzvEv.ROUND_COMPLETE)]
    if etcd:
        return etcd
    rounds: list[Round] = []  # c10d: no etcd to watch; the agents' own lines, grouped
    for e in of(events, AgentEv.RENDEZVOUS_COMPLETE):
        size = e.data.group_world_size
        if rounds and e.t - rounds[-1].t < 2.0:
            last = rounds[-1]
            rounds[-1] = Round(t=last.t, round=None, nodes=(*last.nodes, e.node or "?"),
                               size=last.size, source="agent")
        else:
            rounds.append(Round(t=e.t, round=None, nodes=(e.node or "?",),
                                size=size if isinstance(size, int) else None, source="agent"))
    return rounds


def _lifetimes(events: list[Event], t_end: float) -> list[Lifetime]:
    starts: dict[str, Event] = {}
    ends: dict[str, Event] = {}
    stop = first(events, RunnerEv.JOB_STOPPED)
    stopped = stop.t if stop is not None else None
    for e in of(events, Source.NODE):
        if e.node is None:
            continue
        if e.type == NodeEv.STARTED:
            starts.setdefault(e.node, e)
        elif e.type in (NodeEv.LOST, NodeEv.EXITED) and e.node not in ends:
            ends[e.node] = e
    out = []
    for node, s in starts.items():
        end = ends.get(node)
        if end is not None:
            out.append(Lifetime(node, s.t, end.t, end.type.name, s.data.replaces))
        else:
            out.append(Lifetime(node, s.t, stopped or t_end, "stopped" if stopped else "running", s.data.replaces))
    return out


def _marker(e: Event) -> Marker:
    skip = {"fault", "hit", "actions"}
    data = payload_json(e.data)
    detail = ", ".join(f"{k}={v}" for k, v in data.items() if k not in skip)
    hit = data.get("hit")
    if isinstance(hit, dict) and hit.get("action"):
        detail = f"action={hit['action']}" + (f", {detail}" if detail else "")
    return Marker(t=e.t, event=e.type.name, fault=str(data.get("fault") or e.type.name), node=e.node,
                  detail=detail[:200])


def _world_size(events: list[Event], steady: float | None) -> tuple[list[tuple[float, int]],
                                                                       list[tuple[float, float]]]:
    """World size as training runs at it, and the pauses in training (no step for longer than
    max(2 s, 10 steady steps))."""
    gap = max(2.0, 10 * (steady or 0.0))
    out: list[tuple[float, int]] = []
    pauses: list[tuple[float, float]] = []
    last_t: float | None = None
    for e in of(events, ProgressEv.STEP):
        ws = e.data.world_size or 0
        if last_t is not None and e.t - last_t > gap:
            pauses.append((last_t, e.t))
        if not out or out[-1][1] != ws:
            out.append((e.t, ws))
        last_t = e.t
    if last_t is not None and out:
        out.append((last_t, out[-1][1]))
    return out, pauses


def _checkpoints(events: list[Event]) -> list[tuple[float, int, str]]:
    seen: set[tuple[str, int, int]] = set()
    out = []
    for e in of(events, CheckpointEv.SAVED, CheckpointEv.LOADED, CheckpointEv.CORRUPT):
        step = field_value(e.data, "step")
        if isinstance(step, int):
            key = (e.type.name, step, field_value(e.data, "restart_count") or 0)
            if key not in seen and not (e.type == CheckpointEv.LOADED and step == 0):
                seen.add(key)
                out.append((e.t, step, e.type.name))
    return out


GOODPUT_MEANS = ("the share of the run's wall time, from the first step, spent on training that counted: "
                 "committed steps x the steady step time; downtime and steps trained twice lower it")
"""What "goodput" means, said wherever it is shown (report.html, summary.md)."""
