"""Keep-alive settings the c10d store model allows at N nodes: ``elastic-chaos scale``'s settings to use.

The model (store_model.py) rules a size out when N writes in turn take longer than the heartbeat expiry
K x A, or when the collision-free steady state needs a whole store core. The keep-alive interval K moves
both: a longer one lowers the compare-and-set rate (N/K a second) and lengthens the expiry. The setting
suggested is the *shortest* K among CHOICES_S (torch's A of 3 kept) whose expiry holds N writes in turn
HEADROOM times over and whose steady state keeps the store under MAX_STORE_SHARE of a core: a node lost
hard is dropped only when its heartbeat expires (up to K x A after the loss: elastic_chaos/analysis/limits.py),
so the shortest K that holds costs the least.

The headroom is there because the model is a floor: it leaves out the races lost below the bounds (the
harness measured far more of them than independent arrivals would make) and a burst's collapse. A
setting is derived, never measured past the sizes the harness ran; the caller says so beside it.
"""
from __future__ import annotations

from dataclasses import dataclass

from elastic_chaos.scale.store_model import (
    CACHE_DURATION_S,
    Load,
    Protocol,
    StoreCosts,
    load,
    stall_participants,
)

HEADROOM = 2.0
"""The expiry must hold N writes in turn this many times over (the model's serialization bound is a floor)."""
MAX_STORE_SHARE = 0.5
"""The collision-free steady state may use at most this share of the store's one core (lost races add to it)."""
CHOICES_S = (5, 10, 15, 20, 30, 40, 60, 90, 120)
"""Keep-alive intervals tried, shortest first (torch's default is 5 s)."""
ATTEMPTS = 3
"""keep_alive_max_attempt: torch's default, kept (a longer K, not more attempts, moves the expiry)."""


@dataclass(frozen=True)
class Setting:
    """Keep-alive settings the model allows at ``load.nodes``, and what the model says they cost."""

    keep_alive_interval_s: int
    keep_alive_max_attempt: int
    load: Load
    """The model at N with these settings."""
    collapse_keeps: float
    """Participants a round keeps about, should it collapse anyway (store_model.stall_participants)."""

    @property
    def flags(self) -> str:
        """As `elastic-chaos run` takes them."""
        k, a = self.keep_alive_interval_s, self.keep_alive_max_attempt
        return f"--keep-alive-interval {k} --keep-alive-max-attempt {a}"

    @property
    def rdzv_conf(self) -> str:
        """As torchrun takes them (``--rdzv-conf``; torch's dynamic rendezvous reads both keys)."""
        return f"keep_alive_interval={self.keep_alive_interval_s},keep_alive_max_attempt={self.keep_alive_max_attempt}"


@dataclass(frozen=True)
class NoSetting:
    """No interval among CHOICES_S holds N: ``reason`` says which bound stays over."""

    reason: str


def shortfall(m: Load) -> str | None:
    """Why a keep-alive setting does not hold at ``m``'s size (the two conditions above); None: it holds."""
    if m.serial_s * HEADROOM > m.expiry_s:
        return f"its {m.expiry_s:g} s expiry is under {HEADROOM:g} x {m.serial_s:.1f} s"
    if m.store_cores > MAX_STORE_SHARE:
        return f"its steady state needs {m.store_cores:.2f} of the store's core"
    return None


def suggest(nodes: int, costs: StoreCosts, rtt_s: float = 0.0) -> Setting | NoSetting:
    """The shortest keep-alive interval the model allows at ``nodes`` (see the module docstring)."""
    if nodes < 1:
        raise ValueError(f"nodes {nodes}: at least 1")
    last: Load | None = None
    for k in CHOICES_S:
        protocol = Protocol(float(k), ATTEMPTS, rtt_s=rtt_s)
        m = load(nodes, costs, protocol)
        if shortfall(m) is None:
            return Setting(k, ATTEMPTS, m, stall_participants(nodes, costs, protocol))
        last = m
    assert last is not None
    reads = nodes / CACHE_DURATION_S * costs.at(costs.get_s, nodes)
    if reads > MAX_STORE_SHARE:
        return NoSetting(f"the agents' reads alone (one a second each) need {reads:.2f} of the store's core, "
                         f"over the {MAX_STORE_SHARE:g} allowed: no keep-alive setting lowers them")
    if last.store_cores > MAX_STORE_SHARE:
        return NoSetting(f"even with a {CHOICES_S[-1]} s keep-alive the steady state needs {last.store_cores:.2f} of "
                         f"the store's core, over the {MAX_STORE_SHARE:g} allowed")
    return NoSetting(f"even a {CHOICES_S[-1]} s keep-alive ({last.expiry_s:g} s expiry) is under {HEADROOM:g} x the "
                     f"{last.serial_s:.1f} s that {nodes} writes in turn take")
