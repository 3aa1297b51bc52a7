"""The network between ranks: step time and recovery against an added delay and a loss rate.

``python -m bench --network [--quick]`` measures this section alone and merges it into results.json;
``make bench`` runs it with the rest. Root and iptables (skipped, saying why, elsewhere).

- **step time per degradation** (one job per timeout setting: the fast preset and torch's defaults; the
  reference trainer on gloo, 2 nodes): each condition degrades the link between node-0 and node-1 for
  WINDOW_S, then it is reverted and the job trains WINDOW_S clear before the next. Per condition: what the
  probe across the link measured (round trip, loss each way), the step rate before and while degraded, the
  step-time ratio, the longest step gap and the restarts it cost (elastic_chaos.analysis.link: the figures a
  run's report shows).
- **recovery per degradation** (full bench only; fast preset, 3 nodes): node-0's link with node-1 degraded,
  node-2 killed (the local platform replaces it): the regain and lost steps of the recovery, the world
  re-formed across the degraded link, against the same kill on a clean link.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from elastic_chaos.analysis.link import LinkCost, link_cost
from elastic_chaos.analysis.throughput import step_rate
from elastic_chaos.events import Event, ProgressEv
from elastic_chaos.faults.api import Fault
from elastic_chaos.faults.network import Latency, PacketLoss
from elastic_chaos.faults.node import KillNode
from elastic_chaos.host.links import unavailable_reason
from elastic_chaos.platforms.local.options import NetworkMode
from elastic_chaos.platforms.local.platform import LocalOptions
from elastic_chaos.runner.run import ChaosRun
from elastic_chaos.spec import JobSpec, preset

Say = Callable[[str], None]

DELAYS_MS = (0.0, 1.0, 5.0, 20.0, 100.0)
LOSSES = (0.0, 0.001, 0.01, 0.05)
QUICK_DELAYS_MS = (0.0, 20.0)
QUICK_LOSSES = (0.01,)
WINDOW_S = 12.0
"""How long each condition holds, and how long the job trains clear after it (the rate windows)."""
PAIR = ("node-0", "node-1")
LINKED = LocalOptions(network=NetworkMode.ISOLATED)
"""Nodes in network namespaces of their own, joined by veths: the links a fault degrades."""
SETTINGS = {"fast preset": "fast", "torch defaults": None}


def condition(delay_ms: float, loss: float) -> tuple[str, Fault | None]:
    """The condition's name and its fault (None: the clean link, the baseline)."""
    if delay_ms:
        return f"delay {delay_ms:g} ms each way", Latency(delay_ms=delay_ms, between=PAIR, duration_s=None)
    if loss:
        return f"loss {loss * 100:g} % each way", PacketLoss(rate=loss, between=PAIR, duration_s=None)
    return "clean link", None


def conditions(quick: bool) -> list[tuple[float, float]]:
    delays, losses = (QUICK_DELAYS_MS, QUICK_LOSSES) if quick else (DELAYS_MS, LOSSES[1:])
    return [(d, 0.0) for d in delays] + [(0.0, loss) for loss in losses]


def measure(quick: bool, runs: Path, say: Say) -> dict[str, Any]:
    """Every figure of this section; ``skipped`` with the reason where links cannot be degraded here."""
    reason = unavailable_reason()
    if reason is not None:
        say(f"network: skipped: {reason}")
        return {"skipped": reason}
    out: dict[str, Any] = {"load_avg_1m": round(os.getloadavg()[0], 2), "window_s": WINDOW_S,
                           "pair": list(PAIR), "step_time": {}}
    for label, name in SETTINGS.items():
        say(f"network: step time per degradation, {label}")
        out["step_time"][label] = step_time(runs, say, name, conditions(quick))
    if not quick:
        say("network: recovery across a degraded link (fast preset)")
        out["recovery"] = recovery(runs, say, [(0.0, 0.0), (20.0, 0.0), (100.0, 0.0), (0.0, 0.05)])
    return out


def _job(setting: str | None, nodes: str, step_time: float) -> JobSpec:
    job = JobSpec(nodes=nodes, checkpoint_every=20, max_restarts=10, step_time=step_time)
    return preset(setting).apply(job) if setting else job


def step_time(runs: Path, say: Say, setting: str | None, asked: list[tuple[float, float]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    folder = runs / f"network-step-time-{setting or 'defaults'}"
    with ChaosRun(folder, scenario="bench network step time", options=LINKED) as run:
        # no padding: a step takes what its compute and its all-reduce take, so the link shows in it
        run.start(_job(setting, "2:2", step_time=0.0))
        run.wait_for_step(30, timeout=300)
        for delay_ms, loss in asked:
            name, fault = condition(delay_ms, loss)
            began = time.time()
            record = run.inject(fault) if fault is not None else None
            time.sleep(WINDOW_S)
            if record is not None:
                run.revert(record)
            time.sleep(WINDOW_S)
            steps = run.timeline.select(ProgressEv.STEP)
            cost = None if record is None else link_cost(run.timeline.events(), target=record.target,
                                                         injected_at=record.injected_at, fault=record.fault,
                                                         detail=record.detail)
            # the same windows for every condition (the clean link's included): WINDOW_S clear, WINDOW_S degraded
            before = step_rate(steps, began - WINDOW_S, began)
            during = step_rate(steps, began, began + WINDOW_S)
            rows.append(_row(name, delay_ms, loss, before, during, cost, steps, began))
            say(f"  {name}: rtt {rows[-1]['rtt_ms']} ms, step rate {rows[-1]['rate_before']} -> "
                f"{rows[-1]['rate_during']}/s, restarts {rows[-1]['restarts']}")
    return rows


def _row(name: str, delay_ms: float, loss: float, before: float | None, during: float | None,
         cost: LinkCost | None, steps: list[Any], began: float) -> dict[str, Any]:
    restarts = {e.data.restart_count or 0 for e in steps if e.t >= began} | {0}
    return {"condition": name, "delay_ms": delay_ms, "loss": loss,
            "rtt_ms": cost.rtt_ms if cost else None, "rtt_baseline_ms": cost.rtt_baseline_ms if cost else None,
            "loss_measured": cost.loss_measured if cost else None,
            "rate_before": _r(before), "rate_during": _r(during),
            "step_time_ratio": round(before / during, 2) if before and during else None,
            "longest_gap_s": _r(_gap(steps, began, began + WINDOW_S)),
            "restarts": max(restarts) - max({e.data.restart_count or 0 for e in steps if e.t < began} | {0})}


def _regained(t: float, step: int) -> Callable[[Event], bool]:
    return lambda e: (e.type == ProgressEv.STEP and e.t > t and (e.data.restart_count or 0) > 0
                      and (e.data.step or 0) > step)


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def _gap(steps: list[Any], start: float, end: float) -> float | None:
    times = sorted({e.t for e in steps if start <= e.t <= end})
    return max((b - a for a, b in zip([start, *times], times, strict=False)), default=None)


def recovery(runs: Path, say: Say, asked: list[tuple[float, float]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for delay_ms, loss in asked:
        name, fault = condition(delay_ms, loss)
        folder = runs / f"network-recovery-{name.replace(' ', '-')}"
        with ChaosRun(folder, scenario="bench network recovery", options=LINKED) as run:
            run.start(_job("fast", "2:3", step_time=0.1))
            run.wait_for_step(30, timeout=300)
            if fault is not None:
                run.inject(fault)
            before = run.timeline.select(ProgressEv.STEP)[-1].data.step or 0
            killed = run.inject(KillNode(node="node-2"))
            # the regain: a step past the last one before the kill, in the world that re-formed
            run.wait_for("a step past the pre-fault step", _regained(killed.injected_at, before), timeout=300)
            time.sleep(1.0)
            rec = run.recovery(killed)
        rows.append({"condition": name, "regain_s": None if rec.regain_s is None else round(rec.regain_s, 2),
                     "rendezvous_s": None if rec.rendezvous_s is None else round(rec.rendezvous_s, 2),
                     "lost_steps": rec.lost_steps, "world_size_after": rec.world_size_after})
        say(f"  {name}: regain {rows[-1]['regain_s']} s, lost {rec.lost_steps} steps")
    return rows
