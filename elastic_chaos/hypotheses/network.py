"""Hypotheses of a degraded link between ranks: nothing dies, the job pays in step time.

- ``packet-loss``: loss up to ``--rate`` each way between a node and its peers is survived
  without a restart (TCP retransmits under the collectives), and the step rate comes back;
  with ``--to-store``, loss between the node's agent and the rendezvous store (its heartbeats).
- ``bandwidth``: a rate cap slows steps (the gradients' all-reduce crosses the capped link)
  without a restart, and the step rate comes back when the cap goes.
- ``latency``: a delay on every packet each way between a node and its peers slows steps
  (each collective waits for its round trips) without a restart; the rate comes back. Where
  the two ways differ, each way's growth is checked apart (the probe's one-way delays).
- ``flapping-link``: a link that goes down for less than the collective timeout, and comes
  back, is a stall, not a failure: the job waits (a step gap about as long as a flap), no
  worker fails, no restart.

Each measures the degradation it applied (a probe across the link: elastic_chaos.host.links)
and checks it against what was asked (``applied``), so a verdict never rests on a fault
that did not bite. The report's ``link`` group (elastic_chaos.analysis.link) puts the step
time against the degradation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from elastic_chaos.analysis.link import LinkCost, link_cost
from elastic_chaos.analysis.link_order import Degradation, describe, job_timeouts, order, verdict_line
from elastic_chaos.analysis.throughput import WINDOW_S
from elastic_chaos.analysis.timeouts import Origin, job_backend
from elastic_chaos.errors import SpecError
from elastic_chaos.events import FaultEv, ProgressEv, first
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.network import Bandwidth, FlappingLink, Latency, PacketLoss, _LinkFault
from elastic_chaos.hypotheses.api import Trial, hypothesis, seconds
from elastic_chaos.hypotheses.silent import collective_failures, first_collective_failure_s
from elastic_chaos.hypotheses.silent import collective_timeout as job_collective_timeout
from elastic_chaos.options import option, validate

PAST_TIMEOUT_SLACK_S = 5.0
"""How long after the collective timeout a collective past it may still fail (a loaded machine)."""
ISOLATED = {"network": "isolated"}
"""A link between nodes exists only where each node has its own namespace."""


@dataclass(frozen=True)
class LinkBound:
    tolerance: float = option(0.5, "how far, relative, the measured loss or rate may be from what was asked (the "
                                   "probe's own noise included), and the step rate after from the rate before",
                              minimum=0, maximum=1)
    max_drop: float | None = option(None, "the most of its step rate the job may lose while the link is degraded, "
                                          "a fraction (default: no bound, the drop is reported)", minimum=0, maximum=1)

    def __post_init__(self) -> None:
        validate(self)


def _degrade(t: Trial) -> tuple[_LinkFault, FaultRecord, LinkCost]:
    """Steady training, the fault for its duration, a window after; what it cost."""
    fault = t.fault()
    assert isinstance(fault, _LinkFault)
    if fault.duration_s is None:
        raise SpecError(f"{fault.name} needs --duration: the step rate after the link is whole is part of the "
                        "hypothesis")
    t.start()
    t.steady()
    began = t.run.wait_for_steps(1, timeout=t.opts.timeout_s).t
    t.run.wait_for(f"{WINDOW_S:g}s of steady training", lambda e: e.type == ProgressEv.STEP
                   and e.t >= began + WINDOW_S, timeout=t.opts.timeout_s)
    record = t.inject(fault)
    t.run.phase("degraded", for_s=fault.duration_s)
    restored = t.run.wait_for("the link whole again", lambda e: e.type == FaultEv.REVERTED and e.node == record.target
                              and e.t >= record.injected_at, timeout=fault.duration_s + t.opts.timeout_s)
    # the window after the revert read whole before the cost is measured: the report, measured again from the
    # whole timeline at the end, then finds the same steps in it and says the same rates as the checks
    t.run.wait_for("training after the link is whole again",
                   lambda e: e.type == ProgressEv.STEP and e.t > restored.t + WINDOW_S,
                   timeout=WINDOW_S + t.opts.timeout_s)
    cost = link_cost(t.run.timeline.events(), target=record.target, injected_at=record.injected_at,
                     fault=fault.name, detail=record.detail)
    _check_order(t, fault, past_timeout=_past_timeout(t, fault))
    return fault, record, cost


def _past_timeout(t: Trial, fault: _LinkFault) -> bool:
    """Whether each collective across the link outlasts the job's (known) collective timeout: a delay
    whose round trip is not shorter than it."""
    if not isinstance(fault, Latency) or fault.to_store:
        return False
    limit, _where, known = job_collective_timeout(t.job)
    return known and fault.worst_round_trip_ms / 1000 >= limit


def degradation_of(fault: _LinkFault) -> Degradation:
    """The degradation a link fault applies, as elastic_chaos.analysis.link_order reads it (a
    latency's worst delay: its delay plus its jitter, each way; where the ways differ, half the worst
    round trip, which is what the ordering reads; a cap: none, only the ordering is checked)."""
    if isinstance(fault, Latency):
        return Degradation(delay_ms=fault.worst_round_trip_ms / 2, to_store=fault.to_store)
    if isinstance(fault, PacketLoss):
        return Degradation(rate=fault.rate, to_store=fault.to_store)
    if isinstance(fault, FlappingLink):
        return Degradation(down_s=fault.down_s)
    return Degradation()


def _check_order(t: Trial, fault: _LinkFault, *, past_timeout: bool = False) -> None:
    """The job's timeouts ordered so that this link is never taken for a dead node (the same
    lines as ``elastic-chaos timeouts`` with the fault's options). ``past_timeout``: the run tests a
    link past the collective timeout on purpose; that finding is then the prediction the run checks,
    and only the settings' own ordering can fail this check."""
    backend, known = job_backend(t.job, t.run.timeline.events())
    timeouts = job_timeouts(t.job, backend, Origin(script=bool(t.job.script)))
    ok, line = verdict_line(describe(timeouts, degradation_of(fault)))
    if past_timeout:
        ok, _ = verdict_line(order(timeouts))
        t.verdict.require(ok, f"the job's timeouts against this link ({backend.value}, {known}) predict the "
                              f"failure this run checks: {line}", check="timeouts-ordered")
        return
    t.verdict.require(ok, f"the job's timeouts against this link ({backend.value}, {known}): {line}",
                      check="timeouts-ordered")


def _survived(t: Trial, record: FaultRecord, cost: LinkCost, what: str) -> None:
    """No worker failed and no restart while the link was degraded; the step rate came back."""
    v, tol = t.verdict, t.params.tolerance
    errors = t.run.timeline.select(ProgressEv.WORKER_ERROR, after=record.injected_at)
    v.require(cost.restarts == 0 and not errors,
              f"the job rode {what} out: no worker failed ({len(errors)} errors), {cost.restarts} restart(s) "
              f"({cost.describe()})", check="no-restart")
    v.require(not cost.declared_dead,
              f"the rendezvous dropped {', '.join(cost.declared_dead)} while alive: its heartbeats reached the store "
              "later than the keep-alive tolerance (keep_alive_interval x keep_alive_max_attempt) allows"
              if cost.declared_dead else "no live node was declared dead: every participant of the round stayed "
              "in it while the link was degraded", check="no-false-death")
    v.require(cost.rate_after is not None and cost.rate_before is not None
              and cost.rate_after >= (1 - tol) * cost.rate_before,
              f"the step rate came back: {_rate(cost.rate_after)} after vs {_rate(cost.rate_before)} before",
              check="recovered")
    if t.params.max_drop is not None:
        v.require(cost.drop is not None and cost.drop <= t.params.max_drop,
                  f"{cost.step_times()}: a drop of {_pct(cost.drop)}, at most {t.params.max_drop:.0%}",
                  check="bounded-slowdown")


@hypothesis("packet-loss", "lossy link: a share of the packets between a node and its peers dropped each way; "
                           "the job survives it without a restart and its step rate comes back",
            fault="packet-loss", params=LinkBound, forced=ISOLATED)
def packet_loss(t: Trial) -> None:
    """Drop ``--rate`` of the packets each way between a node and its peers for ``--duration``
    seconds after a steady window: the probe measures that loss (within ``--tolerance`` of it),
    no worker fails, no restart, and the step rate comes back after."""
    fault, record, cost = _degrade(t)
    assert isinstance(fault, PacketLoss)
    measured = cost.loss_measured
    probe = record.detail.get("probe")
    sent = probe.get("sent") if isinstance(probe, dict) else None
    slack = max(t.params.tolerance * fault.rate, 0.03, 3 * _loss_sigma(fault.rate, sent, fault.burst))
    bursts = f" in bursts of {fault.burst:g} packets" if fault.burst is not None else ""
    dropped = (f"; its queue readers dropped {_pct(cost.loss_dropped)} of the link's packets in runs of "
               f"{'?' if cost.burst_dropped is None else f'{cost.burst_dropped:.1f}'} on average"
               if fault.burst is not None else "")
    t.verdict.require(measured is not None and abs(measured - fault.rate) <= slack,
                      f"the probe measured {_pct(measured)} loss each way between {record.target} and "
                      f"{record.detail.get('probed', _peers(record))}, asked {fault.rate:.1%}{bursts} (within "
                      f"{slack:.1%}){dropped}", check="applied")
    _survived(t, record, cost, f"{fault.rate:.1%} loss{bursts}" + (" to the store" if fault.to_store else ""))


@hypothesis("bandwidth", "slow link: the rate between a node and its peers capped; steps slow down without a "
                         "restart and their rate comes back when the cap goes",
            fault="bandwidth", params=LinkBound, forced=ISOLATED)
def bandwidth(t: Trial) -> None:
    """Cap the link between a node and its peers at ``--mbit`` each way for ``--duration``
    seconds: the probe's stream across it stays under the cap (plus ``--tolerance``), no
    worker fails, no restart, and the step rate comes back after. The step time while
    capped is reported against the step time before."""
    fault, record, cost = _degrade(t)
    assert isinstance(fault, Bandwidth)
    got = cost.mbit_measured
    t.verdict.require(got is not None and 0 < got <= fault.mbit * (1 + t.params.tolerance),
                      f"the probe's stream crossed the capped link at {_mbit(got)} Mbit/s (cap {fault.mbit:g}, "
                      f"{_mbit(cost.mbit_baseline)} before the cap)", check="applied")
    _survived(t, record, cost, f"a {fault.mbit:g} Mbit/s cap")


@hypothesis("flapping-link", "flapping link: down (nothing passes, no reset) and up on a schedule between a node "
                             "and its peers; a flap shorter than the collective timeout is a stall, not a failure",
            fault="flapping-link", params=LinkBound, forced=ISOLATED)
def flapping_link(t: Trial) -> None:
    """Take the link down for ``--down`` seconds and up for ``--up``, over and over for
    ``--duration``: each down window passes nothing (the probe in the first one), the job
    stalls (its longest gap between steps at least half a flap) but no worker fails and
    nothing restarts, since every flap heals inside the collective timeout; after it the
    step rate comes back."""
    fault = t.fault()
    assert isinstance(fault, FlappingLink)
    limit, where, _known = job_collective_timeout(t.job)
    if fault.down_s >= limit:
        raise SpecError(f"--down {fault.down_s:g}s is not shorter than the collective timeout ({limit:g}s, {where}): "
                        "such a flap is a partition (elastic-chaos run partition --duration ...)")
    fault, record, cost = _degrade(t)
    assert isinstance(fault, FlappingLink)
    probe = record.detail.get("probe")
    echoed = probe.get("echoed") if isinstance(probe, dict) else None
    t.verdict.require(echoed == 0, f"nothing crossed the link while it was down (the probe in the first flap: "
                                   f"{echoed} of {probe.get('sent') if isinstance(probe, dict) else '?'} echoes)",
                      check="applied")
    t.verdict.require(cost.longest_gap_s is not None and cost.longest_gap_s >= 0.5 * fault.down_s,
                      f"the job stalled while the link was down: its longest gap between steps "
                      f"{seconds(cost.longest_gap_s)}, flaps of {fault.down_s:g}s ({cost.flaps} of them)",
                      check="stalled")
    _survived(t, record, cost, f"a link flapping {fault.down_s:g}s down / {fault.up_s:g}s up")


@hypothesis("latency", "slow link: every packet between a node and its peers delayed each way; steps slow down "
                       "without a restart and their rate comes back when the delay goes",
            fault="latency", params=LinkBound, forced=ISOLATED)
def latency(t: Trial) -> None:
    """Delay every packet between a node and its peers ``--delay-ms`` (+- ``--jitter-ms``) each
    way for ``--duration`` seconds: the probe's round trip grows by twice the delay (within
    ``--tolerance``, at least 5 ms; with ``--reverse-delay-ms``, by the two ways' delays, and each
    way's one-way delay by its own, within ``--tolerance``, at least 3 ms), no worker fails, no
    restart, and the step rate comes back after. The step time while delayed is reported against
    the step time before. A round trip not shorter than the job's collective timeout is a
    partition to every collective: then the collective fails at that timeout (not later), by a
    timeout, the job restarts, and it trains again once the link is whole."""
    fault, record, cost = _degrade(t)
    assert isinstance(fault, Latency)
    added = None if cost.rtt_ms is None or cost.rtt_baseline_ms is None else cost.rtt_ms - cost.rtt_baseline_ms
    want = fault.round_trip_ms
    slack = max(t.params.tolerance * want, 5.0)
    back = fault.reverse()[0]
    asked = (f"{fault.delay_ms:g} ms each way" if not fault.per_direction else
             f"{fault.delay_ms:g} ms node -> {'the store' if fault.to_store else 'peers'} + {back:g} ms back")
    ok = added is not None and abs(added - want) <= slack
    ways = ""
    if fault.per_direction and not fault.to_store:     # one clock at both ends: each way measured apart
        grew = [_grew(cost.one_way_ms, cost.one_way_baseline_ms), _grew(cost.one_way_back_ms,
                                                                         cost.one_way_back_baseline_ms)]
        slacks = [max(t.params.tolerance * w, 3.0) for w in (fault.delay_ms, back)]
        ok = ok and all(g is not None and abs(g - w) <= sl for g, w, sl in zip(grew, (fault.delay_ms, back), slacks,
                                                                             strict=True))
        ways = (f"; each way grew by {_ms(grew[0])} ms out (asked {fault.delay_ms:g}, within {slacks[0]:.1f}) and "
                f"{_ms(grew[1])} ms back (asked {back:g}, within {slacks[1]:.1f})")
    elif fault.per_direction:
        ways = "; the store's probe (TCP connects) measures only the round trip, not each way"
    t.verdict.require(ok, f"the probe's round trip grew by {_ms(added)} ms "
                          f"({cost.rtt_baseline_ms} -> {cost.rtt_ms} ms), asked {want:g} ms ({asked}, within "
                          f"{slack:.1f} ms){ways}", check="applied")
    what = (f"{fault.delay_ms:g} ms of delay each way" if not fault.per_direction else
            f"{fault.delay_ms:g} ms of delay out and {back:g} ms back") + (" to the store" if fault.to_store else "")
    if _past_timeout(t, fault):
        limit, where, _known = job_collective_timeout(t.job)
        _past_the_timeout(t, record, cost, limit, where, what)
        return
    _survived(t, record, cost, what)


def _past_the_timeout(t: Trial, record: FaultRecord, cost: LinkCost, limit: float, where: str, what: str) -> None:
    """A link whose round trip is not shorter than the collective timeout: every collective across it
    fails at that timeout, as across a partition; the job restarts (not later than the timeout says)
    and trains again once the link is whole."""
    v = t.verdict
    events = t.run.timeline.events()
    failed_s = first_collective_failure_s(events, record)
    causes = collective_failures(events, record)
    late = max(PAST_TIMEOUT_SLACK_S, 0.5 * limit)
    v.require(failed_s is not None and limit - 1.0 <= failed_s <= limit + late,
              f"{what} is a round trip past the {limit:g}s collective timeout ({where}): the collective across "
              f"it failed after {seconds(failed_s)} (expected at the timeout, within {late:g}s after it)",
              check="detected-at-timeout")
    v.require(bool(causes) and set(causes) == {"timeout"},
              f"the ranks found out by their timeout, not a closed connection (collective errors: {causes})",
              check="silent")
    v.require(cost.restarts is not None and cost.restarts >= 1,
              f"the job restarted its workers, as across a partition: {cost.restarts} restart(s) "
              f"({cost.describe()})", check="restarted")
    # after the revert the job re-forms first (a rendezvous, a checkpoint load): its first step says it
    # trains again; the window's rate would still hold the restart
    back = (None if cost.restored_at is None else
            first(events, ProgressEv.STEP, after=cost.restored_at))
    v.require(back is not None and cost.restored_at is not None,
              f"the job trained again once the link was whole: step {back.data.step} at world size "
              f"{back.data.world_size}, {back.t - cost.restored_at:.1f}s after the revert"
              if back is not None and cost.restored_at is not None else
              "the job did not train again once the link was whole", check="recovered")


def _loss_sigma(rate: float, sent: object, burst: float | None = None) -> float:
    """One sigma of the probe's loss-each-way estimate at ``rate`` over ``sent`` round trips (a
    round trip is lost with 1 - (1 - rate)^2; the estimate is 1 - sqrt of the share that came
    back): 400 UDP echoes at 5 %: 0.008; 60 connects to the store: 0.02. Losses in bursts of
    ``burst`` packets are correlated: the sigma grows by sqrt((1 + l) / (1 - l)), l = 1 - p - r
    the Gilbert-Elliott chain's memory (its worst case: the probe alone on the link; the job's
    packets between two datagrams make them less correlated): 5 % in bursts of 4: x2.6."""
    if not isinstance(sent, int) or sent <= 0:
        return 0.0
    lost = 1 - (1 - rate) ** 2
    sigma = math.sqrt(lost * (1 - lost) / sent) / (2 * math.sqrt(1 - lost))
    if burst is None:
        return sigma
    memory = 1 - 1 / burst - rate / (burst * (1 - rate))
    return sigma * math.sqrt((1 + memory) / (1 - memory)) if memory < 1 else sigma


def _grew(now: float | None, before: float | None) -> float | None:
    return None if now is None or before is None else now - before


def _ms(v: float | None) -> str:
    return "?" if v is None else f"{v:.1f}"


def _peers(record: FaultRecord) -> str:
    peers = record.detail.get("peers")
    return ", ".join(map(str, peers)) if isinstance(peers, list) else "its peers"


def _pct(v: float | None) -> str:
    return "?" if v is None else f"{v:.1%}"


def _rate(v: float | None) -> str:
    return "?" if v is None else f"{v:.2f}/s"


def _mbit(v: float | None) -> str:
    return "?" if v is None else f"{v:.2f}"
