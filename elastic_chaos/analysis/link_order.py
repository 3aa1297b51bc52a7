"""Whether a job's timeouts let a degraded link be a slow link, never a dead node.

A link that slows, drops packets or goes down for a while kills nothing, but two layers of
torch read silence as death, each on its own clock:

- the collective timeout (init_process_group's ``timeout``; on NCCL, then the worker's dump
  wait ``TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC`` before it exits): a collective that waits on a
  stalled link longer than it fails, the worker exits, and its agent restarts every worker
  through a new rendezvous round, as for a dead peer;
- the rendezvous' keep-alive (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py):
  every ``keep_alive_interval`` a node writes a heartbeat into the store's state; the next
  sync by any node removes a node whose last heartbeat is older than ``keep_alive_interval x
  keep_alive_max_attempt`` (``_sanitize``), alive or not, and no heartbeat is sent for a node
  no longer listed (``_should_keep_alive``). One store call blocks up to the store's
  ``read_timeout`` (60 s) before it fails; a failed call in the agent's monitor loop
  (``num_nodes_waiting``) ends the agent, which stops its workers.

``job_timeouts`` reads a job's settings once; ``order`` lays them out and names each pair
misordered for a degraded link; ``against`` says whether a given degradation (latency's
``--delay-ms``, packet-loss's ``--rate``, flapping-link's ``--down``, on the link between ranks or,
``--to-store``, to the rendezvous store) stays inside every timeout. The stalls TCP adds are
Linux's: a lost segment is resent when its retransmission timer fires, at least 200 ms, doubled
with each loss in a row. ``elastic-chaos timeouts`` prints both before a run; the link
hypotheses record the same lines for the job they ran. Pure: no platform, no clock.
"""
from __future__ import annotations

from dataclasses import dataclass

from elastic_chaos.analysis.timeouts import Finding, Level, Origin, collective_timeout
from elastic_chaos.errors import SpecError
from elastic_chaos.options import DAY_S, option, validate
from elastic_chaos.spec import JobSpec, PgBackend
from elastic_chaos.torch_defaults import NCCL_DUMP_WAIT_MS, NCCL_HEARTBEAT_S, RDZV, RDZV_READ_TIMEOUT_S

TCP_MIN_RTO_S = 0.2
"""Linux's lowest retransmission timeout (TCP_RTO_MIN, 200 ms); each loss in a row doubles it."""
TCP_MAX_RTO_S = 120.0
"""Linux's highest retransmission timeout (TCP_RTO_MAX)."""
RARE = 1e-6
"""Odds per segment at or above which a stall is expected: a training job sends millions of segments."""


@dataclass(frozen=True)
class Degradation:
    """A degraded link, as the link faults take it (none given: only the ordering is checked)."""

    delay_ms: float | None = option(None, "latency's --delay-ms: the delay added to every packet each way",
                                     above=0, units="ms", maximum=DAY_S * 1000)
    rate: float | None = option(None, "packet-loss's --rate: the share of packets dropped each way (0.05: 5 %)",
                                above=0, maximum=0.9)
    down_s: float | None = option(None, "flapping-link's --down: seconds the link is down each time",
                                  flag="--down", above=0, units="s", maximum=DAY_S)
    to_store: bool = option(False, "the degraded link is the node's link to the rendezvous store (its heartbeats), "
                                   "not the one between ranks (the faults' --to-store)")

    def __post_init__(self) -> None:
        validate(self)
        if self.to_store and not self.given():
            raise SpecError("--to-store says which link is degraded: give the degradation too (--delay-ms, --rate "
                            "or --down)")

    def given(self) -> bool:
        return any(v is not None for v in (self.delay_ms, self.rate, self.down_s))


@dataclass(frozen=True)
class JobTimeouts:
    """The settings of one job that decide whether a slow link passes for a dead node, in seconds."""

    backend: PgBackend
    collective_s: float
    collective_from: str
    keep_alive_interval_s: int
    keep_alive_max_attempt: int
    last_call_s: int
    store_timeout_s: float = float(RDZV_READ_TIMEOUT_S)
    nccl_dump_wait_s: float | None = None
    nccl_heartbeat_s: float | None = None

    @property
    def expiry_s(self) -> float:
        """A node without a heartbeat this long is removed from the rendezvous at the next sync."""
        return float(self.keep_alive_interval_s * self.keep_alive_max_attempt)

    @property
    def store_margin_s(self) -> float:
        """The longest the store link may stall with a live node kept: its last heartbeat may be
        one interval old when the stall begins."""
        return self.expiry_s - self.keep_alive_interval_s

    @property
    def restart_after_s(self) -> float:
        """A link stall this long fails a collective and ends its worker (NCCL: after the dump wait)."""
        return self.collective_s + (self.nccl_dump_wait_s or 0.0)


def job_timeouts(job: JobSpec, backend: PgBackend, origin: Origin) -> JobTimeouts:
    """``job``'s timeouts on ``backend`` (a knob left unset: torch's default, torch_defaults)."""
    pg, pg_from = collective_timeout(job, backend, origin)
    r = job.rdzv
    nccl = backend is PgBackend.NCCL
    dump = job.nccl_dump_wait_ms if job.nccl_dump_wait_ms is not None else NCCL_DUMP_WAIT_MS
    beat = job.nccl_heartbeat_timeout_s if job.nccl_heartbeat_timeout_s is not None else NCCL_HEARTBEAT_S
    return JobTimeouts(backend, pg, pg_from, r.keep_alive_interval or RDZV["keep_alive_interval"],
                       r.keep_alive_max_attempt or RDZV["keep_alive_max_attempt"],
                       r.last_call_timeout or RDZV["last_call_timeout"],
                       nccl_dump_wait_s=dump / 1000 if nccl else None,
                       nccl_heartbeat_s=float(beat) if nccl else None)


def ordering(t: JobTimeouts) -> list[tuple[str, float]]:
    """The job's timeouts a degraded link meets, shortest first."""
    rows = [("keep-alive interval", float(t.keep_alive_interval_s)), ("keep-alive expiry", t.expiry_s),
            ("store timeout", t.store_timeout_s), ("collective timeout", t.collective_s)]
    if t.nccl_dump_wait_s is not None:
        rows.append(("NCCL dump wait", t.nccl_dump_wait_s))
    if t.nccl_heartbeat_s is not None:
        rows.append(("NCCL heartbeat", t.nccl_heartbeat_s))
    return sorted(rows, key=lambda row: row[1])


def order(t: JobTimeouts) -> list[Finding]:
    """Each pair of ``t`` that a degraded link meets, ordered or misordered, and what a link does to it."""
    return [_collective_vs_expiry(t), _store_margin(t), *_nccl(t)]


def _s(v: float) -> str:
    return f"{v / 60:g} min" if v >= 600 and v % 60 == 0 else f"{v:.3g} s" if v < 1 else f"{v:g} s"


def _expiry(t: JobTimeouts) -> str:
    return f"keep-alive expiry {_s(t.expiry_s)} ({t.keep_alive_interval_s} s x {t.keep_alive_max_attempt})"


def _collective_vs_expiry(t: JobTimeouts) -> Finding:
    if t.collective_s < t.expiry_s:
        return Finding(Level.WARN, f"misordered: the collective timeout {_s(t.collective_s)} ({t.collective_from}) is "
                                   f"shorter than the {_expiry(t)}: a link between ranks stalled for "
                                   f"{_s(t.collective_s)} to {_s(t.expiry_s)} fails the collective and every worker "
                                   "is restarted, although every node's heartbeats still reach the store: the link "
                                   "is taken for a dead node. Set the collective timeout at or above "
                                   f"{_s(t.expiry_s)}")
    return Finding(Level.OK, f"the collective timeout {_s(t.collective_s)} ({t.collective_from}) is not shorter "
                             f"than the {_expiry(t)}: a link between ranks must stall {_s(t.collective_s)} before "
                             "a worker fails, no less than a node must fall silent to be dropped from the "
                             "rendezvous")


def _store_margin(t: JobTimeouts) -> Finding:
    margin = t.store_margin_s
    if margin <= 0:
        return Finding(Level.WARN, f"misordered: keep_alive_max_attempt {t.keep_alive_max_attempt}: a node's "
                                   f"heartbeats come every {t.keep_alive_interval_s} s and it is dropped from the "
                                   f"rendezvous once its last is {_s(t.expiry_s)} old, so any delay on the link to "
                                   "the store drops a live node; use 3 (torch's) or more")
    if margin >= t.store_timeout_s:
        return Finding(Level.WARN, f"misordered: the store timeout {_s(t.store_timeout_s)} (read_timeout) is not "
                                   f"longer than what the keep-alive tolerates ({_s(margin)}: the {_expiry(t)} less "
                                   "one interval): a link to the store stalled that long fails the agent's own "
                                   "store call first, and the agent stops its workers and exits although its node "
                                   "is alive")
    return Finding(Level.OK, f"a live node's link to the store may stall up to {_s(margin)} (the {_expiry(t)}, less "
                             "the one interval its last heartbeat may be old); longer, and the next sync by another "
                             f"node drops it from the rendezvous, before its own store calls fail at "
                             f"{_s(t.store_timeout_s)} (read_timeout)")


def _nccl(t: JobTimeouts) -> list[Finding]:
    if t.nccl_dump_wait_s is None or t.nccl_heartbeat_s is None:
        return []
    return [Finding(Level.OK, f"NCCL: a link stall longer than the collective timeout {_s(t.collective_s)} ends its "
                              f"worker {_s(t.nccl_dump_wait_s)} later (the dump wait), so the agent restarts the "
                              f"workers no earlier than {_s(t.restart_after_s)} after the stall began; the heartbeat "
                              f"{_s(t.nccl_heartbeat_s)} watches the watchdog thread, not the link")]


def resend_stall_s(losses: int) -> float:
    """The least a segment waits when it is lost ``losses`` times in a row (Linux's timer, doubling)."""
    return sum(min(TCP_MIN_RTO_S * 2.0 ** i, TCP_MAX_RTO_S) for i in range(losses))


def losses_to_stall(seconds: float) -> int:
    """The fewest losses in a row after which a segment has waited ``seconds`` (at the 200 ms floor)."""
    k = 1
    while resend_stall_s(k) < seconds:
        k += 1
    return k


def against(t: JobTimeouts, d: Degradation) -> list[Finding]:
    """Whether the degradation ``d`` stays inside every timeout of ``t`` it meets."""
    out: list[Finding] = []
    bounds = [("the keep-alive's tolerance", t.store_margin_s, "a live node dropped from the rendezvous"),
              ("the store timeout", t.store_timeout_s, "the agent's store call fails: it stops its workers and "
                                                       "exits")] if d.to_store else \
        [("the collective timeout", t.collective_s, "a collective fails and every worker is restarted, every "
                                                    "node alive")]
    where = "the link to the store" if d.to_store else "the link between ranks"
    if d.down_s is not None:
        out.append(_down(d.down_s, where, bounds))
    if d.delay_ms is not None:
        out.append(_delay(d.delay_ms, d.to_store, bounds))
    if d.rate is not None:
        out.append(_loss(d.rate, where, bounds))
    return out


Bounds = list[tuple[str, float, str]]


def _down(down: float, where: str, bounds: Bounds) -> Finding:
    longest = down + min(down + TCP_MIN_RTO_S, TCP_MAX_RTO_S)
    for name, limit, then in bounds:
        if max(limit, 0.0) <= down:
            return Finding(Level.FAIL, f"{where} down {_s(down)} is not inside {name} ({_s(limit)}): {then}")
    tight = [f"{name} ({_s(limit)})" for name, limit, _ in bounds if limit <= longest]
    if tight:
        return Finding(Level.WARN, f"{where} down {_s(down)} is inside {', '.join(tight)}, but TCP resends on its "
                                   f"doubling timer and may find the link again only up to {_s(longest)} after it "
                                   f"went down: {bounds[0][2]} can follow")
    return Finding(Level.OK, f"{where} down {_s(down)} (up to {_s(longest)} until TCP resends) stays inside "
                             + ", ".join(f"{name} ({_s(limit)})" for name, limit, _ in bounds) + ": a stall")


def _delay(delay_ms: float, to_store: bool, bounds: Bounds) -> Finding:
    rtt = 2 * delay_ms / 1000
    if to_store:
        what = (f"each heartbeat is a compare-and-set on the store, at least one round trip "
                           f"({_s(rtt)} at {delay_ms:g} ms each way)")
    else:
        what = f"each collective waits at least one round trip ({_s(rtt)} at {delay_ms:g} ms each way)"
    for name, limit, then in bounds:
        if rtt >= limit:
            return Finding(Level.FAIL, f"{what}, not inside {name} ({_s(limit)}): {then}")
    return Finding(Level.OK, f"{what}, inside " + ", ".join(f"{name} ({_s(limit)})" for name, limit, _ in bounds)
                   + ": slower steps, nothing taken for dead")


def _loss(rate: float, where: str, bounds: Bounds) -> Finding:
    lost = 1 - (1 - rate) ** 2
    lines, worst = [], Level.OK
    for name, limit, then in bounds:
        if limit <= 0:
            return Finding(Level.FAIL, f"{where} with {rate:.3g} loss each way: {name} is {_s(limit)}: {then}")
        k = losses_to_stall(limit)
        odds = lost ** k
        level = Level.FAIL if odds >= RARE else Level.OK
        worst = Level.FAIL if level is Level.FAIL else worst
        expected = f" (at least {RARE:g}: over a long run's many segments, expect it; then {then})"
        lines.append(f"{k} losses in a row stall a segment at least {_s(resend_stall_s(k))}, past {name} "
                     f"({_s(limit)}), odds {odds:.2g} per segment" + (expected if level is Level.FAIL else ""))
    return Finding(worst, f"{where} with {rate:.3g} loss each way (a segment or its ack lost: {lost:.3g}, losses "
                          "independent): " + "; ".join(lines))


def describe(t: JobTimeouts, d: Degradation | None = None) -> list[Finding]:
    """The ordering verdict, and with ``d`` whether it stays inside: what the CLI and a link run both say."""
    return [*order(t), *(against(t, d) if d is not None and d.given() else [])]


def verdict_line(findings: list[Finding]) -> tuple[bool, str]:
    """(whether no finding fails, one line naming each): the check a link run records."""
    return (all(f.level is not Level.FAIL for f in findings),
            "; ".join(f"{f.level.value}: {f.text}" for f in findings))
