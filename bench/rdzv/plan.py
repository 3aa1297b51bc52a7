"""How the sweep runs each size on this machine: under which time dilation, which episodes, or not at all.

Two cores cannot run a thousand agents in real time: past UNDILATED_UP_TO nodes a size runs under a time
dilation (bench.rdzv.clock) sized from what the size before cost this machine (:func:`dilation_for`), and
the larger the dilation, the fewer episodes fit in the real time a sweep has (:func:`plan`). docs/SCALE.md
("Past 32 nodes, time dilation") says why each rule is what it is.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from bench.rdzv.episodes import EPISODE_REAL_S, LOSSES, MODES, processes_for, timeout_s
from bench.rdzv.records import SizeResult

UNDILATED_UP_TO = 32
"""Sizes up to this run in real time; above, under a time dilation (bench.rdzv.clock) chosen by dilation_for."""
HARNESS_SHARE = 0.25
"""The share of each host process' core the agents' CPU per real second is sized for: far below BUSY_PROCESS
(one interpreter lock) and RUN_DELAY, so that no agent waits for this machine."""
FULL_EPISODES_UP_TO = 8.0
"""Up to this dilation a size runs every episode; above, each perceived second costs that many real ones, so
only formation, the steady window and the one-node hard loss and leave (with their joins) run."""
REDUCED_MODES = ("hard", "leave")
REDUCED_LOSSES: tuple[tuple[str, float | None], ...] = (("1", None),)
FORMATION_REAL_S = 2400.0
"""Past the sizes whose losses can be judged here (MIN_PERCEIVED_TIMEOUT_S), a size runs its formation and
steady window only, and the formation may wait this many real seconds: the largest sizes are the question the
sweep is for, and one long episode costs less than the five of a reduced size."""

SCOPES: dict[str, tuple[tuple[str, ...], tuple[tuple[str, float | None], ...], float]] = {
    "every episode": (MODES, LOSSES, EPISODE_REAL_S),
    "formation, steady, hard 1 and leave 1": (REDUCED_MODES, REDUCED_LOSSES, EPISODE_REAL_S),
    "formation and steady only": ((), (), FORMATION_REAL_S),
}
"""What a size runs, by how much dilation it needs: (loss modes, loss sizes, real seconds one episode may wait)."""
FULL, REDUCED, FORMATION = SCOPES


def dilation_for(n: int, previous: SizeResult | None = None, *, processes: int | None = None,
                 cores: int | None = None, episodes: tuple[str, ...] | None = None) -> float:
    """The time dilation size ``n`` runs under here: 1 up to UNDILATED_UP_TO nodes; above, from what the
    ``previous`` size cost this machine, in cores per perceived second: the larger of its steady window (the
    harness' CPU per node x nodes) and its busiest episode (the machine's busy share x cores x its dilation: a
    re-formation's compare-and-set storm costs far more than the steady state, and a dilation sized on the
    steady state alone let heartbeats expire in the storm); ``episodes``: only those labels count (a size that
    runs its formation only need not be sized for the size before's storms). Each node's work grows with N (the
    state every node reads and writes holds every node), so the total grows as N^2; the dilation makes that fit
    HARNESS_SHARE of each host process' core, rounded up to a power of two. Without a previous size:
    (N / UNDILATED_UP_TO)^2."""
    if n <= UNDILATED_UP_TO:
        return 1.0
    if previous is not None and (previous.steady is not None or previous.episodes):
        m, d = previous.nodes, previous.dilation or 1.0
        steady = (previous.steady.agent_cpu if previous.steady is not None else 0.0) * m
        busiest = max((e.busy for e in previous.episodes if episodes is None or e.label in episodes), default=0.0)
        demand = max(steady, busiest * (cores or os.cpu_count() or 1) * d) * (n / m) ** 2
        need = demand / (HARNESS_SHARE * (processes or processes_for(n)))
    else:
        need = (n / UNDILATED_UP_TO) ** 2
    return float(max(1, 2 ** math.ceil(math.log2(max(1.0, need)))))


MIN_PERCEIVED_TIMEOUT_S = 30.0
"""A size whose dilation leaves an episode less than this many perceived seconds is not run with it: a
re-formation after a hard loss needs 6-7 s with `fast` and a storm more, and a formation 1-2 s up to 256 nodes,
so a shorter timeout would call torch broken for this machine's want of time."""


@dataclass(frozen=True)
class Plan:
    """How the sweep runs one size here: under which dilation, which episodes; or why not at all."""

    dilation: float
    scope: str
    """A key of SCOPES."""
    not_run: str | None = None

    @property
    def episode_real_s(self) -> float:
        return SCOPES[self.scope][2]


def plan(n: int, previous: SizeResult | None, fixed: float | None = None) -> Plan:
    """Every episode up to FULL_EPISODES_UP_TO; the reduced set while an episode keeps MIN_PERCEIVED_TIMEOUT_S
    perceived seconds; then formation and steady only, sized on the size before's formation and steady state
    and given FORMATION_REAL_S, and so every size after it (its storms were not measured, so a dilation for
    losses could not be sized); past that, not run (``fixed``: that dilation, whatever the size before)."""
    d = fixed if fixed is not None else dilation_for(n, previous)
    # a size before that ran its formation only says nothing of what a loss's storm costs: no losses after it
    storms_known = fixed is not None or previous is None or previous.scope != FORMATION
    if storms_known and timeout_s(n, d) >= MIN_PERCEIVED_TIMEOUT_S:
        return Plan(d, FULL if d <= FULL_EPISODES_UP_TO else REDUCED)
    f = fixed if fixed is not None else dilation_for(n, previous, episodes=("formation",))
    if timeout_s(n, f, FORMATION_REAL_S) >= MIN_PERCEIVED_TIMEOUT_S:
        return Plan(f, FORMATION)
    return Plan(f, FORMATION, not_run=(
        f"not run: the dilation it needs here (x{f:g}, from the size before's CPU) leaves its formation "
        f"{timeout_s(n, f, FORMATION_REAL_S):.3g} perceived seconds within {FORMATION_REAL_S / 60:g} real minutes, "
        f"under the {MIN_PERCEIVED_TIMEOUT_S:g} s it is judged in; measuring it needs a machine with more cores "
        "(fewer agents per core, a smaller dilation) or a longer bench"))
