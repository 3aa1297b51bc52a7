"""What the rendezvous scale harness measures for one job size, episode by episode.

One job of N hollow agents (:mod:`bench.rdzv.hollow`), elastic range ``N - 10 %:N`` so that every
loss below leaves a world the rendezvous accepts, in this order:

1. **formation**: every node starts at once -> all N in one completed round.
2. **steady state** for a window: store operations and payload bytes per second, the store's CPU,
   the harness' CPU per node, and rounds nobody asked for (a live node declared dead).
3. **losses**, each followed by a **join** of as many new nodes (back to N, a steady-state join):
   hard (the node's heartbeats stop: a machine lost), ``leave`` (SIGTERM with elastic_chaos.trainer.rdzv_leave:
   the node leaves the rendezvous), ``sigterm`` (torch's own SIGTERM path: the agent stops without
   leaving); of 1 node, 1 % and 10 % of N (at least one), each at a random phase of the heartbeat
   cycle (seeded per size), as a real loss falls. At the loss the survivors' worker groups
   fail at once, as their collectives would (or, replaying a real job, each at the moment its real
   agent started the next rendezvous: ``restarts``): re-formation is loss -> every survivor in one
   round of the smaller world.

Every episode records how long this machine was the limit while it ran (its cores, or one host
process' interpreter lock, saturated: Harness.saturated_s): above :data:`~bench.rdzv.records.LIMITED_SHARE` of the
episode, its figure is limited by this machine, not by torch (an upper bound). And what the store
did meanwhile -- operations, payload bytes, its CPU -- which does not depend on this machine.
The first episode that does not complete within its timeout ends the size (``broke``).
"""
from __future__ import annotations

import itertools
import math
import os
import random
import time
from collections.abc import Callable
from pathlib import Path

from bench.rdzv.cpu import on_cpu_between_s
from bench.rdzv.harness import Formed, Harness, ScaleJob
from bench.rdzv.pipe import HarnessError
from bench.rdzv.records import Episode, SizeResult, Stalled, Steady, machine_limited
from elastic_chaos.torch_defaults import RDZV

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


class _Meter:
    """CPU of the harness and the store, and the store's operations, over an episode."""

    def __init__(self, harness: Harness) -> None:
        self.h = harness
        self.counts = harness.counts()
        self.t = time.monotonic()
        self.cpu = harness.cpu()
        self.throttled = harness.store_throttled_s()

    def saturated(self) -> tuple[float, float]:
        """(seconds this machine was the limit, seconds elapsed) up to the last busy()."""
        return self.h.saturated_s(self.t, self.t_end), round(self.t_end - self.t, 2)

    def busy(self) -> float:
        """Share of this machine's cores used since the start (read when the episode ended)."""
        now, cpu = time.monotonic(), self.h.cpu()
        self.t_end, self.cpu_end = now, cpu
        self.throttled_end = self.h.store_throttled_s()
        used = sum(cpu.values()) - sum(self.cpu.values())
        return round(used / max(1e-6, (now - self.t) * (os.cpu_count() or 1)), 3)

    def store_work(self) -> tuple[int, int, float]:
        """(operations, payload bytes, store CPU seconds) since the start, up to the last busy()."""
        after = self.h.counts()
        ops = sum(after["ops"].values()) - sum(self.counts["ops"].values())
        moved = after["sent"] + after["received"] - self.counts["sent"] - self.counts["received"]
        return ops, moved, round(self.cpu_end["store"] - self.cpu["store"], 3)


EPISODE_REAL_S = 900.0
"""The most real seconds one episode may wait, whatever the dilation: a dilated size's timeout in perceived
seconds shrinks so that a broken size ends in bounded time (its finding says which timeout it was)."""


STEADY_REAL_S = 120.0
"""The most real seconds the steady window may last: under a large dilation it shrinks, in perceived seconds
(at least one heartbeat cycle of every node is in it from 60 s perceived down)."""


def steady_window_s(steady_s: float, dilation: float) -> float:
    """The steady window in perceived seconds: ``steady_s``, bounded in real time by STEADY_REAL_S."""
    return min(steady_s, STEADY_REAL_S / dilation)


def timeout_s(n: int, dilation: float = 1.0, real_s: float = EPISODE_REAL_S) -> float:
    """How long (perceived seconds) one episode may take before the size counts as broken: generous,
    bounded in real time by ``real_s`` (EPISODE_REAL_S unless the caller gives its episodes longer)."""
    return min(90.0 + 0.25 * n, real_s / dilation)


class Sizer:
    """Runs the episodes of one size on one harness (see the module docstring)."""

    def __init__(self, harness: Harness, say: Callable[[str], None], *, steady_s: float,
                 modes: tuple[str, ...] = MODES, losses: tuple[tuple[str, float | None], ...] = LOSSES,
                 offsets: list[float] | None = None, restarts: list[float] | None = None,
                 repeat: int = 1, episode_real_s: float = EPISODE_REAL_S) -> None:
        self.repeat = repeat
        self.restarts = restarts
        self.h = harness
        self.say = say
        self.steady_s = steady_window_s(steady_s, harness.job.dilation)
        self.modes = modes
        self.losses = losses
        self.offsets = offsets
        self.n = harness.job.nodes
        self.alive = list(range(self.n))
        self.gone: set[int] = set()
        """Nodes lost so far (killed or sent SIGTERM): their heartbeats are meant to expire."""
        self.next_id = self.n
        self.episodes: list[Episode] = []
        self.rng = random.Random(self.n)
        self.timeout_s = timeout_s(self.n, harness.job.dilation, episode_real_s)
        interval = harness.job.rdzv.keep_alive_interval or RDZV["keep_alive_interval"]
        self.heartbeat_period = 2.0 * interval
        """A loss lands at a random phase of this (seeded): torch writes a heartbeat only when the last is an
        interval old, on a timer of the same period, so one lands about every two intervals, and how long a
        hard loss takes to expire depends on where in that cycle it falls, as a real kill's does."""

    def _record(self, kind: str, label: str, nodes: int, world: int, formed: Formed, meter: _Meter,
                since: float) -> Episode:
        busy = meter.busy()
        dead = self.h.false_deaths(since, self.gone)
        ages = [d["heartbeat_age_s"] for d in dead if d.get("heartbeat_age_s") is not None]
        saturated_s, elapsed_s = meter.saturated()
        ep = Episode(kind, label, nodes, world, formed.seconds, formed.rounds, busy, tuple(formed.errors[:5]),
                     formed.missing, *meter.store_work(), saturated_s, elapsed_s, declared_dead=len(dead),
                     dead_heartbeat_age_s=max(ages) if ages else None,
                     store_throttled_s=round(meter.throttled_end - meter.throttled, 2),
                     stalled=self._stalled() if formed.seconds is None else None,
                     limited=machine_limited(saturated_s, elapsed_s))
        self.episodes.append(ep)
        errors = f", {len(formed.errors)} error(s): {formed.errors[0]}" if formed.errors else ""
        if dead:
            errors += f", {len(dead)} live participant(s) declared dead out of a round they never completed"
        self.say(f"    {self.h.job.backend.value} N={self.n} {label}: {ep.seconds} s, {ep.rounds} round(s), "
                 f"busy {busy:.0%} (saturated {ep.saturated_s} s), store {ep.store_ops} ops "
                 f"{ep.store_bytes / 1e6:.1f} MB {ep.store_cpu_s} s CPU{errors}")
        return ep

    def _stalled(self) -> Stalled | None:
        """The state an episode that did not complete left in the store (None when it cannot be read: the
        figure is the store's, and its absence only says less)."""
        try:
            state = self.h.peek()
        except HarnessError as exc:
            self.say(f"    the rendezvous state could not be read: {exc}")
            return None
        return None if state is None else Stalled.from_json(state)

    def formation(self, offsets: list[float] | None = None) -> Episode:
        """Every node starts at once, or node i ``offsets[i]`` seconds after the first (a real job's
        arrivals): measured from the last node's start."""
        offsets = offsets or [0.0] * self.n
        if len(offsets) != self.n:
            raise ValueError(f"{len(offsets)} offsets for {self.n} nodes")
        self.h.spawn(self.alive, timeout_s=timeout_s(self.n))  # real work: not dilated
        meter = _Meter(self.h)
        at = self.h.clock.time() + 0.5
        by_offset: dict[float, list[int]] = {}
        for i, offset in zip(self.alive, sorted(offsets), strict=True):
            by_offset.setdefault(offset, []).append(i)
        for offset, ids in by_offset.items():
            self.h.run_nodes(ids, at + offset)
        formed = self.h.wait_world(self.alive, self.n, at + max(offsets), self.timeout_s + max(offsets))
        return self._record("formation", "formation", self.n, self.n, formed, meter, at)

    def steady(self) -> Steady:
        before_counts, meter = self.h.counts(), _Meter(self.h)
        cpu0, began = self.h.threads_on_cpu(), time.monotonic()
        events = self.h.drain(self.steady_s)
        cpu1, after_counts = self.h.threads_on_cpu(), self.h.counts()
        window = self.h.clock.perceived_s(time.monotonic() - began)  # rates per perceived second
        ops = {k: round((v - before_counts["ops"].get(k, 0)) / window, 1) for k, v in after_counts["ops"].items()}
        moved = (after_counts["sent"] + after_counts["received"]) - (before_counts["sent"] + before_counts["received"])
        rounds = {e["round"] for e in events if e["ev"] == "formed"}
        busy = meter.busy()
        saturated_s = meter.saturated()[0]
        return Steady(round(window, 2), ops, round(moved / window, 1),
                      round(on_cpu_between_s(cpu0["store"], cpu1["store"]) / window, 3),
                      round(on_cpu_between_s(cpu0["agents"], cpu1["agents"]) / window / len(self.alive), 5),
                      len(rounds), busy, saturated_s, machine_limited(saturated_s, round(window, 2)))

    def loss(self, mode: str, label: str, fraction: float | None) -> Episode:
        k = lost(self.n, fraction)
        victims = sorted(self.rng.sample(self.alive, k))
        survivors = [i for i in self.alive if i not in victims]
        self.gone.update(victims)
        meter = _Meter(self.h)
        at = self.h.clock.time() + 0.3 + self.rng.uniform(0.0, self.heartbeat_period)
        self.h.order(victims, "kill" if mode == "hard" else "sigterm", at, leave=mode == "leave")
        for fail_at, ids in self._fail_times(survivors, at).items():
            self.h.order(ids, "fail", fail_at)
        formed = self.h.wait_world(survivors, len(survivors), at, self.timeout_s)
        self.alive = survivors
        return self._record("loss", f"{mode} {label}", k, len(survivors), formed, meter, at)

    def _fail_times(self, survivors: list[int], at: float) -> dict[float, list[int]]:
        """When each survivor's workers fail after a loss at ``at``: at once, or replaying a real job's
        ``restarts`` (fault -> each survivor's agent starting its next rendezvous, sorted), less half a
        monitor interval: a hollow agent sees the failure at its next check of the workers, as the real
        agent did within the replayed offset."""
        if self.restarts is None:
            return {at: survivors}
        if len(self.restarts) != len(survivors):
            raise ValueError(f"{len(self.restarts)} restart offsets for {len(survivors)} survivors")
        times: dict[float, list[int]] = {}
        half_check = self.h.job.monitor_interval / 2
        for i, offset in zip(survivors, sorted(self.restarts), strict=True):
            times.setdefault(at + max(0.0, offset - half_check), []).append(i)
        return times

    def join(self, after: str, k: int) -> Episode:
        new = list(range(self.next_id, self.next_id + k))
        self.next_id += k
        self.h.spawn(new, timeout_s=timeout_s(self.n))
        meter = _Meter(self.h)
        at = self.h.clock.time() + 0.3
        self.h.run_nodes(new, at)
        everyone = self.alive + new
        formed = self.h.wait_world(everyone, len(everyone), at, self.timeout_s)
        self.alive = everyone
        return self._record("join", f"join after {after}", k, len(everyone), formed, meter, at)

    def run(self) -> tuple[list[Episode], Steady | None, str | None]:
        """Every episode in order; stops at the first that does not complete (the reason returned)."""
        first = self.formation(self.offsets)
        if first.seconds is None:
            return self.episodes, None, _broke(first, self.timeout_s)
        steady = self.steady() if self.steady_s > 0 else None
        for mode, (label, fraction), _ in itertools.product(self.modes, self.losses, range(self.repeat)):
            if mode == "sigterm" and label not in SIGTERM_LOSSES:
                continue
            ep = self.loss(mode, label, fraction)
            if ep.seconds is None:
                return self.episodes, steady, _broke(ep, self.timeout_s)
            self.h.drain(1.0)  # the smaller world trains a moment before anyone arrives
            ep = self.join(f"{mode} {label}", ep.nodes)
            if ep.seconds is None:
                return self.episodes, steady, _broke(ep, self.timeout_s)
        return self.episodes, steady, None


def _broke(ep: Episode, timeout: float | None = None) -> str:
    seen = f"; first errors: {'; '.join(ep.errors[:2])}" if ep.errors else ""
    if ep.declared_dead:
        seen += (f"; {ep.declared_dead} live participant(s) declared dead out of a round they never completed "
                 f"(heartbeats up to {ep.dead_heartbeat_age_s} s old)")
    st = ep.stalled
    if st:
        beats = st.heartbeat_span_s
        span = f", their heartbeats spanning {beats} s" if beats is not None else ""
        seen += (f"; the store's state then: round {st.round}{' complete' if st.complete else ' forming'}, "
                 f"{st.participants} participant(s) and {st.wait_list} waiting{span}")
    within = "" if timeout is None else f" of {timeout:.4g} perceived seconds"
    return (f"{ep.label}: {ep.missing} node(s) had not formed the world of {ep.world} after the episode's "
            f"timeout{within} ({ep.rounds} round(s) completed meanwhile){seen}")


def measure_size(job: ScaleJob, work_dir: Path, say: Callable[[str], None], *, steady_s: float = 10.0,
                 modes: tuple[str, ...] = MODES, losses: tuple[tuple[str, float | None], ...] = LOSSES,
                 offsets: list[float] | None = None, restarts: list[float] | None = None,
                 repeat: int = 1, episode_real_s: float = EPISODE_REAL_S) -> SizeResult:
    """Every episode for ``job`` on a fresh store and fresh processes (``steady_s`` 0: no steady window;
    ``offsets``: the nodes' arrival times, see Sizer.formation; ``restarts``: when the survivors' workers
    fail after a loss, see Sizer._fail_times; ``repeat``: each loss and its join that many times;
    ``episode_real_s``: the real seconds one episode may wait, see timeout_s). Blocks;
    raises HarnessError when a process or the store fails (not when the rendezvous does: that is ``broke``)."""
    began, load = time.monotonic(), os.getloadavg()[0]
    with Harness(job, work_dir) as h:
        episodes, steady, broke = Sizer(h, say, steady_s=steady_s, modes=modes, losses=losses,
                                        offsets=offsets, restarts=restarts, repeat=repeat,
                                        episode_real_s=episode_real_s).run()
        extra = {"store_unthrottled": h.unthrottled_why} if h.unthrottled_why else {}
    return SizeResult(job.backend.value, job.nodes, job.min_nodes, job.max_nodes, job.processes, tuple(episodes),
                      steady, round(load, 2), round(os.getloadavg()[0], 2), broke,
                      round(time.monotonic() - began, 1), extra, job.dilation, h.store_share)


def processes_for(n: int) -> int:
    """Host processes for ``n`` nodes: one per core (the GIL), fewer for small jobs."""
    return max(1, min(os.cpu_count() or 1, math.ceil(n / 4)))
