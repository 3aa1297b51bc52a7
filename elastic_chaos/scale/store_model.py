"""The c10d rendezvous store's load, derived from torch's protocol: where one key under compare-and-set breaks.

torch 2.13's dynamic rendezvous (``dynamic_rendezvous.py`` over ``c10d_rendezvous_backend.py``) keeps the whole
rendezvous in one pickled ``_RendezvousState`` under one TCPStore key, base64-encoded. Per node:

- every ``keep_alive_interval`` K its keep-alive timer runs ``_RendezvousKeepAliveOp`` through
  ``_DistributedRendezvousOpExecutor.run``: a read (``get``) when its cached copy is older than the state
  holder's ``cache_duration`` C (1 s), then a ``compare_set`` of the whole state with its new heartbeat,
  sending the state it read (the token) and the new one and receiving the state the store holds;
- its agent's monitor loop calls ``num_nodes_waiting()``, a read at most once per C;
- a lost ``compare_set`` is retried at once with the state the store returned (no backoff); the state is
  then unpickled, ``_sanitize``\\ d (nodes whose heartbeat is older than K x ``keep_alive_max_attempt`` A are
  dropped), changed, pickled and encoded again;
- joining a round is the same loop (``ADD_TO_PARTICIPANTS``), after a random wait of up to 0.3 s in
  round 0; a waiting participant polls every 1 s (``_Action.SYNC``) until the round is complete.

From that, with three costs measured on a machine (:class:`StoreCosts`: the state's bytes per participant,
the store's CPU per operation of that size, a client's CPU per attempt), :func:`load` gives for N nodes:

- S(N): the state's size; the collision-free steady load N x (1/C reads + 1/K compare-and-sets) in
  operations, bytes and store cores (``store_cores``): a floor, since every lost race adds an operation;
- the serialization bound: a compare-and-set wins only if nobody won since its token was read, so the key
  takes at most one winning write per turnaround w(N) = round trip + the client's attempt + the store's
  compare-and-set. Every node must land a heartbeat within K x A or the others' ``_sanitize`` drops it, so
  N x w(N) > K x A means no order of requests keeps N nodes alive once formed: the size breaks;
- the collapse: once every node is retrying, the single-threaded store serves each contender's attempt in
  turn, about one of which wins per cycle; the round then holds only the participants whose heartbeats
  fit in K x A at that rate (:func:`stall_participants`);
- a formation time for sizes below the bounds: the last node's round-0 wait, the joins in turn, the
  waiting nodes' 1 s poll.

It does not model the rate of lost races below the bounds (the harness measures it: nodes whose timers
line up collide far more than independent arrivals would), nor whether a size below the bounds collapses
under a burst (the harness' 1,024 did). Pure functions; nothing here measures (bench/rdzv/storebench.py
does) and nothing imports torch.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CACHE_DURATION_S = 1.0
"""``_BackendRendezvousStateHolder``'s ``cache_duration``: a read serves the cached state this long."""
ROUND0_DELAY_S = 0.3
"""``next_rendezvous`` waits up to this (uniformly) before joining round 0."""
POLL_S = 1.0
"""``_DistributedRendezvousOpExecutor.run`` waits this long after ``_Action.SYNC`` (waiting for others)."""
CAS_STATES = 3
"""A compare-and-set moves three states: the token and the new state sent, the store's state returned."""


@dataclass(frozen=True)
class StoreCosts:
    """What one store operation costs, measured at given state sizes on one machine (bench/rdzv/storebench.py)."""

    nodes: tuple[int, ...]
    """The participants in the state at which each figure below was measured, ascending."""
    state_b64: tuple[float, ...]
    """Bytes of the base64 state the store holds and moves, per size."""
    get_s: tuple[float, ...]
    """The store's CPU seconds per ``get`` of the state, per size."""
    cas_s: tuple[float, ...]
    """The store's CPU seconds per ``compare_set`` of the state, per size."""
    client_s: tuple[float, ...]
    """A client's CPU seconds per attempt (decode, unpickle, sanitize, pickle, encode), per size."""
    machine: str = ""
    date: str = ""
    load_avg: tuple[float, ...] = ()
    """The machine's load average before and after the measurement."""

    def __post_init__(self) -> None:
        k = len(self.nodes)
        if k < 2 or any(len(s) != k for s in (self.state_b64, self.get_s, self.cas_s, self.client_s)):
            raise ValueError("store costs need the same number (at least 2) of sizes for every figure")
        if list(self.nodes) != sorted(set(self.nodes)) or self.nodes[0] < 1:
            raise ValueError(f"store cost sizes must be distinct and ascending from 1: {self.nodes}")
        if min(*self.state_b64, *self.get_s, *self.cas_s, *self.client_s) <= 0:
            raise ValueError("store costs must be positive")

    def at(self, figure: Sequence[float], n: float) -> float:
        """``figure`` at ``n`` participants: measured there, else the power law through the two measured sizes
        around it (costs grow as a power of the state's size), the nearest segment's beyond them."""
        xs = self.nodes
        i = min(max(1, next((j for j, x in enumerate(xs) if x >= n), len(xs) - 1)), len(xs) - 1)
        (x0, y0), (x1, y1) = (xs[i - 1], figure[i - 1]), (xs[i], figure[i])
        slope = math.log(y1 / y0) / math.log(x1 / x0)
        return float(y0 * (max(n, 1.0) / x0) ** slope)

    def measured(self, n: float) -> bool:
        """Whether ``n`` lies within the sizes measured (beyond them a cost is extrapolated)."""
        return self.nodes[0] <= n <= self.nodes[-1]


@dataclass(frozen=True)
class Protocol:
    """The rendezvous settings the load depends on, and the network between the nodes and the store."""

    keep_alive_interval_s: float
    keep_alive_max_attempt: int
    rtt_s: float = 0.0
    """The round trip between a node and the store (0: loopback, as in the harness)."""
    client_speedup: float = 1.0
    """How many times faster than one of this machine's cores a client turns a state around (the harness under
    time dilation d: its agents get up to d times the CPU per second they perceive; 1: a real node)."""

    @property
    def expiry_s(self) -> float:
        """K x A: a node whose heartbeat is older is dropped by the others' ``_sanitize``."""
        return self.keep_alive_interval_s * self.keep_alive_max_attempt


@dataclass(frozen=True)
class Load:
    """The store's load and the bounds at N nodes (:func:`load`)."""

    nodes: int
    state_b64: float
    """S(N), bytes."""
    reads_per_s: float
    cas_per_s: float
    """Collision-free: N/C reads and N/K compare-and-sets per second."""
    bytes_per_s: float
    """Payload bytes those move: a read moves S, a compare-and-set 3 S."""
    store_cores: float
    """The store's CPU for them, in cores of the measuring machine: at 1 or more, one store core cannot serve
    even a collision-free steady state."""
    turnaround_s: float
    """w(N): round trip + a client's attempt + the store's compare-and-set; at most one write wins per w."""
    serial_s: float
    """N x w(N): the least time in which every node can land one write, however the store orders them."""
    expiry_s: float
    formation_s: float | None
    """Modelled formation time (all N starting together); None past a bound."""
    extrapolated: bool
    """A cost came from beyond the sizes measured."""

    @property
    def ops_per_s(self) -> float:
        return self.reads_per_s + self.cas_per_s

    @property
    def over_capacity(self) -> bool:
        return self.store_cores >= 1.0

    @property
    def over_serialization(self) -> bool:
        return self.serial_s > self.expiry_s

    @property
    def breaks(self) -> bool:
        """Whether a bound rules N out: no order of requests keeps every heartbeat younger than K x A."""
        return self.over_capacity or self.over_serialization

    def why(self) -> str:
        """The bound(s) that rule N out, in words ("" when none does)."""
        out = []
        if self.over_capacity:
            out.append(f"the collision-free steady state alone needs {self.store_cores:.2f} store cores (one)")
        if self.over_serialization:
            out.append(f"{self.nodes} writes in turn take {self.serial_s:.1f} s, longer than the "
                       f"{self.expiry_s:g} s after which a heartbeat expires")
        return "; ".join(out)


def load(n: int, costs: StoreCosts, protocol: Protocol) -> Load:
    """The store's collision-free load at ``n`` nodes and the bounds (see the module docstring)."""
    if n < 1:
        raise ValueError(f"nodes {n}: at least 1")
    s = costs.at(costs.state_b64, n)
    reads, cas = n / CACHE_DURATION_S, n / protocol.keep_alive_interval_s
    cas_s = costs.at(costs.cas_s, n)
    cores = reads * costs.at(costs.get_s, n) + cas * cas_s
    w = turnaround_s(n, costs, protocol)
    serial = n * w
    out = Load(n, s, reads, cas, reads * s + cas * CAS_STATES * s, cores, w, serial, protocol.expiry_s, None,
               not costs.measured(n))
    if out.breaks:
        return out
    return Load(**{**out.__dict__, "formation_s": formation_s(n, w)})


def turnaround_s(n: int, costs: StoreCosts, protocol: Protocol) -> float:
    """w(n): from the store's reply to a lost compare-and-set to the store having served the retry."""
    return protocol.rtt_s + costs.at(costs.client_s, n) / protocol.client_speedup + costs.at(costs.cas_s, n)


def formation_s(n: int, w: float) -> float:
    """All ``n`` nodes starting together: the joins end when the last node's round-0 wait (the largest of n
    uniform waits, n/(n+1) of ROUND0_DELAY_S) is over or when n writes in turn are done, whichever is later;
    the last waiting node then sees the complete round at its next poll (n/(n+1) of POLL_S), and reads it
    (one more turnaround)."""
    last = n / (n + 1)
    return max(last * ROUND0_DELAY_S, n * w) + last * POLL_S + w


def stall_participants(n: int, costs: StoreCosts, protocol: Protocol) -> float:
    """After the collapse: every node retries, the store serves each contender once per cycle (n operations
    of a state of P participants) and about one write wins per cycle, so P heartbeats can be kept younger
    than K x A only while P <= K x A / (n x cost per operation at P). The P solving that (bisection: the
    right side falls as P grows). The round forms only if P reaches its ``min_nodes``."""
    def per_op(p: float) -> float:
        return (costs.at(costs.get_s, p) + costs.at(costs.cas_s, p)) / 2

    lo, hi = 1.0, float(n)
    if protocol.expiry_s / (n * per_op(hi)) >= hi:
        return hi
    for _ in range(60):
        mid = (lo + hi) / 2
        if protocol.expiry_s / (n * per_op(mid)) >= mid:
            lo = mid
        else:
            hi = mid
    return lo


def break_point(costs: StoreCosts, protocol: Protocol, limit: int = 1 << 20) -> int | None:
    """The smallest N that a bound rules out (None: none up to ``limit``). Both bounds grow with N (the state,
    every cost and the number of writers do), so the first N that breaks is found by doubling, then bisection."""
    if load(1, costs, protocol).breaks:
        return 1
    hi = 2
    while not load(hi, costs, protocol).breaks:
        if hi >= limit:
            return None
        hi *= 2
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if load(mid, costs, protocol).breaks:
            hi = mid
        else:
            lo = mid
    return hi


def error(model: float, measured: float) -> float:
    """The model's relative error against a measurement: (model - measured) / measured."""
    return (model - measured) / measured


def costs_to_json(costs: StoreCosts) -> dict[str, object]:
    return {"nodes": list(costs.nodes), "state_b64": list(costs.state_b64), "get_s": list(costs.get_s),
            "cas_s": list(costs.cas_s), "client_s": list(costs.client_s), "machine": costs.machine,
            "date": costs.date, "load_avg": list(costs.load_avg)}


def costs_from_json(raw: dict[str, object]) -> StoreCosts:
    """The costs :func:`costs_to_json` wrote; ValueError/KeyError/TypeError for anything else."""
    def floats(key: str) -> tuple[float, ...]:
        value = raw[key]
        if not isinstance(value, list):
            raise TypeError(f"{key}: a list expected")
        return tuple(float(v) for v in value)

    return StoreCosts(tuple(int(v) for v in floats("nodes")), floats("state_b64"), floats("get_s"),
                      floats("cas_s"), floats("client_s"), str(raw.get("machine", "")), str(raw.get("date", "")),
                      floats("load_avg") if "load_avg" in raw else ())


def describe(n: int, costs: StoreCosts, protocol: Protocol, *, formation: bool = True) -> list[tuple[str, str]]:
    """What the model says at ``n`` nodes, as (what, the figure and its reading) lines for ``elastic-chaos scale``:
    the state, the serialization bound, the formation time on real nodes or why there is none (``formation``:
    False where the caller prints it elsewhere), the round a collapse leaves, and the smallest size the bounds
    rule out with these settings. The collision-free load is not among them: ``elastic-chaos scale`` prints it
    with the steady state's figures (elastic_chaos/scale/modelled.py), once."""
    m = load(n, costs, protocol)
    extra = " (costs extrapolated beyond the sizes measured)" if m.extrapolated else ""
    verdict = "RULED OUT" if m.over_serialization else "within it"
    first = break_point(costs, protocol)
    out = [
        ("state (every participant and heartbeat, base64)", f"{m.state_b64 / 1e3:.1f} KB{extra}"),
        ("N writes in turn (N x w)", f"{m.serial_s:.1f} s (w = {m.turnaround_s * 1e3:.1f} ms) against the heartbeat "
                                     f"expiry {m.expiry_s:g} s: {verdict}"),
    ]
    if formation:
        out.append(("formation on real nodes, all starting together",
                    f"{m.formation_s:.1f} s" if m.formation_s is not None else f"none: {m.why()}"))
    return [*out,
            ("after a collapse, a round keeps about", f"{stall_participants(n, costs, protocol):.0f} participants"),
            ("smallest size the bounds rule out", f"{first:,} nodes" if first is not None else "none found")]
