"""What the rendezvous lab measures for one job size, as one typed value from the harness to results.json.

:func:`bench.rdzv.episodes.measure_size` builds a :class:`SizeResult` (its :class:`Episode` s and
:class:`Steady` window); the sweep (bench/rdzv/sweep.py) adds how it ran the size (``scope``, the real
seconds an episode had, the date) or why it did not; results.json keeps it (``rdzv_scale.sizes``, and
``device_runs.scale`` for another machine's sizes); the figures, the findings, the tables and the plot read
it back through :meth:`SizeResult.from_json`. Records written by older benches lack newer fields: they
stay absent (bench/json_record.py), read as the defaults below.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from bench.json_record import JsonRecord, each, optional, read

LIMITED_SHARE = 0.1
"""An episode whose machine was saturated (Harness.saturated_s) for more than this share of its duration
measured this machine, not torch: its figure is an upper bound."""


def machine_limited(saturated_s: float, elapsed_s: float) -> bool:
    """Whether this machine, not torch, set the pace of a window (see LIMITED_SHARE)."""
    return saturated_s > LIMITED_SHARE * max(elapsed_s, 1e-9)


@dataclass(frozen=True)
class Stalled(JsonRecord):
    """The rendezvous state the store held when an episode gave up, in numbers (bench.rdzv.hollow.state_summary)."""

    participants: int = 0
    wait_list: int = 0
    round: int | None = None
    complete: bool = False
    state_bytes: int | None = None
    """Absent when the store held no state at all."""
    heartbeat_span_s: float | None = None
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False, kw_only=True)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Stalled:
        return cls(**read(cls, raw))


@dataclass(frozen=True)
class Episode(JsonRecord):
    kind: str = ""
    """formation, loss or join."""
    label: str = ""
    """e.g. ``formation``, ``hard 1%``, ``join after hard 1%``."""
    nodes: int = 0
    """Nodes lost or joined (N for the formation)."""
    world: int = 0
    """The world size it ends in."""
    seconds: float | None = None
    """To the last node's rendezvous complete in that world; None: not within the timeout."""
    rounds: int = 0
    busy: float = 0.0
    """Share of this machine's cores the harness and the store used meanwhile, on average."""
    errors: tuple[str, ...] = ()
    missing: int = 0
    store_ops: int = 0
    """Store operations of every node meanwhile (state reads and compare-and-sets, store gets and sets)."""
    store_bytes: int = 0
    """Payload bytes those moved."""
    store_cpu_s: float = 0.0
    """CPU the store spent meanwhile: its busy time, whatever the agents' machine."""
    saturated_s: float = 0.0
    """Seconds of it during which this machine was the limit (Harness.saturated_s)."""
    elapsed_s: float = 0.0
    declared_dead: int = 0
    """*Live* participants (of a completed round, or of one forming) declared dead meanwhile that never completed
    that round: nodes this harness never stopped whose heartbeat was found expired (Harness.false_deaths; a lost
    node's expiry, and a re-forming node's, which formed the round before it stopped its heartbeats, are not
    counted)."""
    dead_heartbeat_age_s: float | None = None
    """The oldest such heartbeat when it was declared dead (the expiry is interval x attempts)."""
    store_throttled_s: float = 0.0
    """Under time dilation: real seconds the store wanted a CPU beyond its one-core quota (the store, one
    core, was the limit -- a property of the job, not of this machine)."""
    stalled: Stalled | None = None
    """When it did not complete: the rendezvous state the store held at the timeout; None when it completed or
    could not be read."""
    limited: bool = False
    """This machine was saturated for more than LIMITED_SHARE of it (machine_limited): an upper bound."""
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False, kw_only=True)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Episode:
        return cls(**read(cls, raw, errors=tuple, stalled=optional(Stalled.from_json)))


@dataclass(frozen=True)
class Steady(JsonRecord):
    """A steady-state window: what the store served and what it cost."""

    window_s: float = 0.0
    ops_per_s: dict[str, float] = field(default_factory=dict)
    bytes_per_s: float = 0.0
    """Payload bytes sent and received by all nodes, per second."""
    store_cpu: float = 0.0
    """The store's CPU, in cores (etcd, or the c10d store process)."""
    agent_cpu: float = 0.0
    """The harness' CPU per node, in cores: what each simulated torchrun agent costs."""
    unplanned_rounds: int = 0
    """Rendezvous rounds completed in the window though nothing was lost or joined."""
    busy: float = 0.0
    saturated_s: float = 0.0
    limited: bool = False
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False, kw_only=True)

    @property
    def ops(self) -> float:
        """Store operations per second, every kind together."""
        return sum(self.ops_per_s.values())

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Steady:
        return cls(**read(cls, raw))


NOT_RUN_FIELDS = frozenset({"backend", "nodes", "dilation", "episodes", "steady", "broke", "not_run", "scope"})
"""What a size the sweep planned but did not run holds."""
FAILED_FIELDS = frozenset({"backend", "nodes", "episodes", "steady", "broke", "scope", "episode_real_s", "date"})
"""What a size whose harness failed (a process or the store, not torch) holds."""


@dataclass(frozen=True)
class SizeResult(JsonRecord):
    """One size: its episodes, its steady window, the first episode that did not complete; and how the sweep ran
    it (``scope``, ``episode_real_s``, ``date``) or why it did not (``not_run``)."""

    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"scope", "episode_real_s", "date", "not_run"})

    backend: str = ""
    nodes: int = 0
    min_nodes: int | None = None
    max_nodes: int | None = None
    processes: int | None = None
    episodes: tuple[Episode, ...] = ()
    steady: Steady | None = None
    load_before: float | None = None
    load_after: float | None = None
    broke: str | None = None
    """The first episode that did not complete, with what was seen; None: every episode completed."""
    wall_s: float | None = None
    extra: dict[str, str] = field(default_factory=dict)
    dilation: float = 1.0
    """Time dilation it ran under (bench.rdzv.clock): its seconds are perceived seconds."""
    store_share: float | None = None
    """The share of one core the store was held to under dilation (bench.rdzv.throttle); None: unthrottled."""
    scope: str | None = None
    """What the sweep ran at this size (a key of bench.rdzv.plan.SCOPES); None: every episode (a size measured
    before sizes carried their scope, or outside the sweep)."""
    episode_real_s: float | None = None
    """The real seconds one episode could wait (None: bench.rdzv.episodes.EPISODE_REAL_S)."""
    date: str | None = None
    not_run: str | None = None
    """Why the sweep did not run this size (it stops there)."""
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False, kw_only=True)

    def episode(self, label: str) -> Episode | None:
        return next((e for e in self.episodes if e.label == label), None)

    def dated(self, date: str | None) -> SizeResult:
        """With ``date`` when it carries none (measured before sizes carried their own)."""
        return self if self.date is not None else self.updated(date=date)

    @classmethod
    def skipped(cls, backend: str, nodes: int, dilation: float, why: str, scope: str) -> SizeResult:
        """A size the sweep planned and did not run, and why."""
        return cls(backend, nodes, dilation=dilation, not_run=why, scope=scope,
                   absent=_all_but(NOT_RUN_FIELDS - {"not_run", "scope"}))

    @classmethod
    def failed(cls, backend: str, nodes: int, why: str) -> SizeResult:
        """A size whose harness failed (not torch's rendezvous): broken, with nothing measured."""
        return cls(backend, nodes, broke=f"the harness itself failed: {why}",
                   absent=_all_but(FAILED_FIELDS - {"scope", "episode_real_s", "date"}))

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> SizeResult:
        return cls(**read(cls, raw, episodes=each(Episode.from_json), steady=optional(Steady.from_json)))


def _all_but(kept: frozenset[str]) -> frozenset[str]:
    """The fields of a size left absent when it holds only ``kept`` (and the OPTIONAL ones it sets)."""
    return frozenset(f for f in SizeResult.__dataclass_fields__ if f != "absent") - kept - SizeResult.OPTIONAL
