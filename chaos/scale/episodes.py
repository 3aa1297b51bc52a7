"""What the rendezvous scale harness measures for one job size, episode by episode.

One job of N hollow agents (:mod:`chaos.scale.hollow`), elastic range ``N - 10 %:N`` so that every
loss below leaves a world the rendezvous accepts, in this order:

1. **formation**: every node starts at once -> all N in one completed round.
2. **steady state** for a window: store operations and payload bytes per second, the store's CPU,
   the harness' CPU per node, and rounds nobody asked for (a live node declared dead).
3. **losses**, each followed by a **join** of as many new nodes (back to N, a steady-state join):
   hard (the node's heartbeats stop: a machine lost), ``leave`` (SIGTERM with trainer.rdzv_leave:
   the node leaves the rendezvous), ``sigterm`` (torch's own SIGTERM path: the agent stops without
   leaving); of 1 node, 1 % and 10 % of N (at least one). At the loss the survivors' worker groups
   fail at once, as their collectives would: re-formation is loss -> every survivor in one round of
   the smaller world.

Every episode records the share of this machine's cores that the harness and the store kept busy
while it ran: above :data:`BUSY_LIMIT` a figure is limited by this machine, not by torch.
The first episode that does not complete within its timeout ends the size (``broke``).
"""
from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chaos.scale.harness import Formed, Harness, ScaleJob

BUSY_LIMIT = 0.8
"""Above this share of the machine's cores busy, an episode's figure says more about this machine than torch."""

LOSSES: tuple[tuple[str, float | None], ...] = (("1", None), ("1%", 0.01), ("10%", 0.10))
"""Loss sizes: one node, then fractions of N (at least one node)."""

MODES = ("hard", "leave", "sigterm")
"""How a lost node goes: heartbeats stop; SIGTERM and leave (the remedy); torch's own SIGTERM path."""

SIGTERM_LOSSES = ("1",)
"""torch's own SIGTERM path is measured for one node only: in rendezvous terms it is the hard loss."""


def lost(n: int, fraction: float | None) -> int:
    """Nodes lost for a loss size: one, or ``fraction`` of ``n`` rounded (at least one)."""
    return 1 if fraction is None else max(1, round(n * fraction))


def elastic_range(n: int) -> tuple[int, int]:
    """MIN:MAX of the simulated job: room for the largest loss below N."""
    return max(1, n - lost(n, LOSSES[-1][1])), n


@dataclass(frozen=True)
class Episode:
    kind: str
    """formation, loss or join."""
    label: str
    """e.g. ``formation``, ``hard 1%``, ``join after hard 1%``."""
    nodes: int
    """Nodes lost or joined (N for the formation)."""
    world: int
    """The world size it ends in."""
    seconds: float | None
    """To the last node's rendezvous complete in that world; None: not within the timeout."""
    rounds: int
    busy: float
    """Share of this machine's cores the harness and the store used meanwhile."""
    errors: tuple[str, ...] = ()
    missing: int = 0

    @property
    def limited(self) -> bool:
        return self.busy > BUSY_LIMIT


@dataclass(frozen=True)
class Steady:
    """A steady-state window: what the store served and what it cost."""

    window_s: float
    ops_per_s: dict[str, float]
    bytes_per_s: float
    """Payload bytes sent and received by all nodes, per second."""
    store_cpu: float
    """The store's CPU, in cores (etcd, or the c10d store process)."""
    agent_cpu: float
    """The harness' CPU per node, in cores: what each simulated torchrun agent costs."""
    unplanned_rounds: int
    """Rendezvous rounds completed in the window though nothing was lost or joined."""
    busy: float

    @property
    def limited(self) -> bool:
        return self.busy > BUSY_LIMIT


@dataclass(frozen=True)
class SizeResult:
    backend: str
    nodes: int
    min_nodes: int
    max_nodes: int
    processes: int
    episodes: tuple[Episode, ...] = ()
    steady: Steady | None = None
    load_before: float = 0.0
    load_after: float = 0.0
    broke: str | None = None
    """The first episode that did not complete, with what was seen; None: every episode completed."""
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def episode(self, label: str) -> Episode | None:
        return next((e for e in self.episodes if e.label == label), None)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["episodes"] = [{**asdict(e), "limited": e.limited} for e in self.episodes]
        if self.steady is not None:
            d["steady"] = {**asdict(self.steady), "limited": self.steady.limited}
        return d


class _Meter:
    """CPU of the harness and the store over an interval, as a share of this machine's cores."""

    def __init__(self, harness: Harness) -> None:
        self.h = harness
        self.t = time.monotonic()
        self.cpu = harness.cpu()

    def busy(self) -> float:
        now, cpu = time.monotonic(), self.h.cpu()
        used = sum(cpu.values()) - sum(self.cpu.values())
        return round(used / max(1e-6, (now - self.t) * (os.cpu_count() or 1)), 3)


def timeout_s(n: int) -> float:
    """How long one episode may take before the size counts as broken: generous, bounded."""
    return 90.0 + 0.25 * n


class Sizer:
    """Runs the episodes of one size on one harness (see the module docstring)."""

    def __init__(self, harness: Harness, say: Callable[[str], None], *, steady_s: float,
                 modes: tuple[str, ...] = MODES) -> None:
        self.h = harness
        self.say = say
        self.steady_s = steady_s
        self.modes = modes
        self.n = harness.job.nodes
        self.alive = list(range(self.n))
        self.next_id = self.n
        self.episodes: list[Episode] = []
        self.rng = random.Random(self.n)

    def _record(self, kind: str, label: str, nodes: int, world: int, formed: Formed, busy: float) -> Episode:
        ep = Episode(kind, label, nodes, world, formed.seconds, formed.rounds, busy, formed.errors[:5],
                     formed.missing)
        self.episodes.append(ep)
        self.say(f"    {self.h.job.backend.value} N={self.n} {label}: {ep.seconds} s, {ep.rounds} round(s), "
                 f"busy {busy:.0%}" + (f", {len(formed.errors)} error(s): {formed.errors[0]}" if formed.errors else ""))
        return ep

    def formation(self) -> Episode:
        self.h.spawn(self.alive, timeout_s=timeout_s(self.n))
        meter = _Meter(self.h)
        at = time.time() + 0.5
        self.h.run_nodes(self.alive, at)
        formed = self.h.wait_world(self.alive, self.n, at, timeout_s(self.n))
        return self._record("formation", "formation", self.n, self.n, formed, meter.busy())

    def steady(self) -> Steady:
        before_counts, meter = self.h.counts(), _Meter(self.h)
        began = time.monotonic()
        events = self.h.drain(self.steady_s)
        after_counts, window = self.h.counts(), time.monotonic() - began
        cpu0, cpu1 = meter.cpu, self.h.cpu()
        ops = {k: round((v - before_counts["ops"].get(k, 0)) / window, 1) for k, v in after_counts["ops"].items()}
        moved = (after_counts["sent"] + after_counts["received"]) - (before_counts["sent"] + before_counts["received"])
        rounds = {e["round"] for e in events if e["ev"] == "formed"}
        return Steady(round(window, 2), ops, round(moved / window, 1),
                      round((cpu1["store"] - cpu0["store"]) / window, 3),
                      round((cpu1["agents"] - cpu0["agents"]) / window / len(self.alive), 5),
                      len(rounds), meter.busy())

    def loss(self, mode: str, label: str, fraction: float | None) -> Episode:
        k = lost(self.n, fraction)
        victims = sorted(self.rng.sample(self.alive, k))
        survivors = [i for i in self.alive if i not in victims]
        meter = _Meter(self.h)
        at = time.time() + 0.3
        self.h.order(victims, "kill" if mode == "hard" else "sigterm", at, leave=mode == "leave")
        self.h.order(survivors, "fail", at)
        formed = self.h.wait_world(survivors, len(survivors), at, timeout_s(self.n))
        self.alive = survivors
        return self._record("loss", f"{mode} {label}", k, len(survivors), formed, meter.busy())

    def join(self, after: str, k: int) -> Episode:
        new = list(range(self.next_id, self.next_id + k))
        self.next_id += k
        self.h.spawn(new, timeout_s=timeout_s(self.n))
        meter = _Meter(self.h)
        at = time.time() + 0.3
        self.h.run_nodes(new, at)
        everyone = self.alive + new
        formed = self.h.wait_world(everyone, len(everyone), at, timeout_s(self.n))
        self.alive = everyone
        return self._record("join", f"join after {after}", k, len(everyone), formed, meter.busy())

    def run(self) -> tuple[list[Episode], Steady | None, str | None]:
        """Every episode in order; stops at the first that does not complete (the reason returned)."""
        first = self.formation()
        if first.seconds is None:
            return self.episodes, None, _broke(first)
        steady = self.steady()
        for mode in self.modes:
            for label, fraction in LOSSES:
                if mode == "sigterm" and label not in SIGTERM_LOSSES:
                    continue
                ep = self.loss(mode, label, fraction)
                if ep.seconds is None:
                    return self.episodes, steady, _broke(ep)
                self.h.drain(1.0)  # the smaller world trains a moment before anyone arrives
                ep = self.join(f"{mode} {label}", ep.nodes)
                if ep.seconds is None:
                    return self.episodes, steady, _broke(ep)
        return self.episodes, steady, None


def _broke(ep: Episode) -> str:
    seen = f"; first errors: {'; '.join(ep.errors[:2])}" if ep.errors else ""
    return (f"{ep.label}: {ep.missing} node(s) had not formed the world of {ep.world} after the episode's "
            f"timeout ({ep.rounds} round(s) completed meanwhile){seen}")


def measure_size(job: ScaleJob, work_dir: Path, say: Callable[[str], None], *, steady_s: float = 10.0,
                 modes: tuple[str, ...] = MODES) -> SizeResult:
    """Every episode for ``job`` on a fresh store and fresh processes. Blocks; raises HarnessError when a
    process or the store fails (not when the rendezvous does: that is ``broke``)."""
    began, load = time.monotonic(), os.getloadavg()[0]
    with Harness(job, work_dir) as h:
        episodes, steady, broke = Sizer(h, say, steady_s=steady_s, modes=modes).run()
    return SizeResult(job.backend.value, job.nodes, job.min_nodes, job.max_nodes, job.processes, tuple(episodes),
                      steady, round(load, 2), round(os.getloadavg()[0], 2), broke,
                      round(time.monotonic() - began, 1))


def processes_for(n: int) -> int:
    """Host processes for ``n`` nodes: one per core (the GIL), fewer for small jobs."""
    return max(1, min(os.cpu_count() or 1, math.ceil(n / 4)))
