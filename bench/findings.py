"""Plain-language findings computed from the measured figures (nothing hard-coded): the recovery cases,
the spot pair with and without leaving the rendezvous, the cluster beside the local platform, the local nodes."""
from __future__ import annotations

import os
from typing import Any

from bench.local_nodes import NodesRun
from bench.stats import median

TARGET_RATIO = 1.5


def _median(case: dict[str, Any], key: str) -> float | None:
    return median(case.get(key))


def recovery_findings(results: dict[str, Any]) -> list[str]:
    out: list[str] = []
    floor = median(results.get("floor_s"))
    cases: dict[str, Any] = results.get("recovery", {})
    for key, case in cases.items():
        phases = {p: _median(case, p) for p in ("detect", "rendezvous", "restart", "retrain")}
        known = {p: v for p, v in phases.items() if v is not None}
        if not known:
            continue
        top = max(known, key=lambda p: known[p])
        total = sum(known.values())
        out.append(f"{key}: the {top} phase dominates ({known[top]:.1f} s of {total:.1f} s)")
    for key, case in cases.items():
        backend, preset, fault = key.split("/")
        default = cases.get(f"{backend}/default/{fault}")
        if preset == "fast" and default and _median(default, "recovery_s") and _median(case, "recovery_s"):
            d, f = _median(default, "recovery_s"), _median(case, "recovery_s")
            assert d is not None and f is not None
            out.append(f"{backend}/{fault}: the fast preset recovers in {f:.1f} s vs {d:.1f} s with torch's "
                       f"defaults ({d / f:.1f}x faster)")
    out += _partition_detection(cases)
    out += _cluster_vs_local(cases)
    out += leave_findings(results)
    fast_kill = cases.get("etcd-v2/fast/kill-node")
    if fast_kill and floor:
        ratio = fast_kill.get("ratio_to_floor")
        if ratio is not None and ratio <= TARGET_RATIO:
            out.append(f"etcd-v2/fast/kill-node recovers in {ratio}x the floor (target <= {TARGET_RATIO}x): met")
        elif ratio is not None:
            excess = {p: (_median(fast_kill, p) or 0.0) for p in ("detect", "rendezvous")}
            restart = _median(fast_kill, "restart") or 0.0
            excess["restart (beyond the floor)"] = max(0.0, restart - floor)
            worst = max(excess, key=lambda p: excess[p])
            out.append(f"etcd-v2/fast/kill-node recovers in {ratio}x the floor (target <= {TARGET_RATIO}x): "
                       f"NOT met; beyond the floor's {floor:.1f} s, the {worst} phase costs the most "
                       f"({excess[worst]:.1f} s): " + _why(worst))
    return out


def _partition_detection(cases: dict[str, Any]) -> list[str]:
    """Where the backends split one partition's recovery differently, say why.

    Detection is the first evidence of the loss anywhere. etcd-v2 keeps each node's
    keep-alive as an etcd key with a TTL, so its expiry is visible in the store; c10d
    keeps it inside the TCPStore on a surviving node and only checks it on the next
    rendezvous, so the first evidence is the survivors' collective timing out.
    """
    out: list[str] = []
    for preset in ("default", "fast"):
        etcd, c10d = cases.get(f"etcd-v2/{preset}/partition"), cases.get(f"c10d/{preset}/partition")
        if not (etcd and c10d):
            continue
        de, dc = _median(etcd, "detect"), _median(c10d, "detect")
        re_, rc = _median(etcd, "recovery_s"), _median(c10d, "recovery_s")
        if de is None or dc is None or re_ is None or rc is None or abs(dc - de) < 2.0:
            continue
        out.append(f"{preset}/partition: detect {de:.1f} s on etcd-v2 vs {dc:.1f} s on c10d (recovery "
                   f"{re_:.1f} s vs {rc:.1f} s). etcd-v2's keep-alive expiry is visible in etcd; c10d's "
                   "lives in the store on a survivor and is only checked at the next rendezvous, so the "
                   "first evidence there is the collective timing out (the trainer's --pg-timeout)")
    return out


def _why(phase: str) -> str:
    return {
        "detect": "the survivor's worker must fail its collective and exit, and the agent notice it",
        "rendezvous": "the dead node must miss keep_alive_max_attempt heartbeats (whole seconds) before "
                      "it leaves the rendezvous, then last_call_timeout (>= 1 s in torch) runs",
        "restart (beyond the floor)": "the agent stops the group, assigns ranks through the store and "
                                      "spawns the worker; on 2 cores that work competes with the other "
                                      "processes of the job",
    }.get(phase, "")


def scale_findings(scale: list[NodesRun]) -> list[str]:
    out: list[str] = []
    ok = [s for s in scale if s.ok]
    failed = [s for s in scale if not s.ok]
    if ok:
        biggest = max(ok, key=lambda s: s.nodes)
        mem = biggest.memory_per_node_mb or 0.0
        total_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
        out.append(f"largest size that formed and recovered: {biggest.nodes} nodes "
                   f"(formation {biggest.formation_s} s, recovery {biggest.recovery_s} s)")
        if mem:
            out.append(f"memory: {mem:.0f} MB per node (agent + worker); {total_mb / 1024:.0f} GB of RAM "
                       f"would hold about {int(total_mb / mem)} nodes")
        if len(ok) >= 2:
            small, large = min(ok, key=lambda s: s.nodes), biggest
            if small.formation_s and large.formation_s:
                per = (large.formation_s - small.formation_s) / (large.nodes - small.nodes)
                out.append(f"formation grows by about {per:.1f} s per node: every node starts two Python "
                           f"processes that import torch (~3.5 s of CPU each) on {os.cpu_count()} cores, "
                           "so CPU, not memory, limits the count here")
    for s in failed:
        out.append(f"{s.nodes} nodes did not complete: {s.error}")
    return out


def _cluster_vs_local(cases: dict[str, Any]) -> list[str]:
    """For each fault measured on the local cluster and locally: the difference, and the phase it is in."""
    out: list[str] = []
    for key, case in cases.items():
        if not key.startswith("cluster:"):
            continue
        local = cases.get(key.partition(":")[2])
        c, lo = _median(case, "recovery_s"), _median(local or {}, "recovery_s")
        if local is None or c is None or lo is None:
            continue
        diffs = {p: (_median(case, p) or 0.0) - (_median(local, p) or 0.0)
                 for p in ("detect", "rendezvous", "restart", "retrain")}
        worst = max(diffs, key=lambda p: abs(diffs[p]))
        out.append(f"{key}: recovers in {c:.1f} s on the cluster vs {lo:.1f} s locally; the {worst} phase "
                   f"differs most ({diffs[worst]:+.1f} s)")
    return out



LEAVE_SUFFIX = "+leave"


def spot_pairs(results: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(key without the remedy, its case, the case with it) for every spot-interruption measured both ways."""
    cases: dict[str, Any] = results.get("recovery", {})
    return [(key, case, cases[key + LEAVE_SUFFIX]) for key, case in cases.items()
            if key.endswith("/spot-interruption") and key + LEAVE_SUFFIX in cases]


def spot_summary(results: dict[str, Any]) -> list[str]:
    """One line per spot-interruption pair: the floor, the recovery without and with the remedy, as ratios
    (what `make bench-quick` prints at its end)."""
    out = []
    for key, without, with_ in spot_pairs(results):
        floor = _floor(results, with_)
        a, b = _median(without, "recovery_s"), _median(with_, "recovery_s")
        out.append(f"{key}: floor {floor} s | without leaving the rendezvous {_s(a)} = "
                   f"{without.get('ratio_to_floor')}x | with --leave-on-sigterm {_s(b)} = "
                   f"{with_.get('ratio_to_floor')}x the floor "
                   f"(goal <= {TARGET_RATIO}x: {'met' if _met(with_) else 'NOT met'})")
    return out


def leave_findings(results: dict[str, Any]) -> list[str]:
    """What leaving the rendezvous on SIGTERM saved, and what is left above the floor."""
    out = []
    for key, without, with_ in spot_pairs(results):
        floor = _floor(results, with_)
        ra, rb = _median(without, "rendezvous"), _median(with_, "rendezvous")
        if ra is None or rb is None or not floor:
            continue
        left = {p: _median(with_, p) or 0.0 for p in ("detect", "rendezvous")}
        restart, restart_without = _median(with_, "restart") or 0.0, _median(without, "restart") or 0.0
        text = (f"{key}{LEAVE_SUFFIX}: the rendezvous phase takes {rb:.1f} s instead of {ra:.1f} s "
                f"(recovery {with_.get('ratio_to_floor')}x the floor instead of {without.get('ratio_to_floor')}x; "
                f"goal <= {TARGET_RATIO}x: {'met' if _met(with_) else 'NOT met'}). Beyond the floor's "
                f"{floor:.1f} s remain: detect {left['detect']:.1f} s (the departing worker finishes its "
                f"step, saves and exits before the survivor's collective fails), rendezvous "
                f"{left['rendezvous']:.1f} s after that (last_call_timeout, >= 1 s in torch, "
                f"and the 1 s poll of a waiting node), restart {restart - floor:+.1f} s against the floor")
        gone = _median(with_, "departed_exit_s")
        formed = sum(_median(with_, p) or 0.0 for p in ("detect", "exit", "rendezvous"))
        if gone is not None and abs(restart - restart_without) > 0.5:
            overlap = (f"still exiting {gone - formed:.1f} s after the survivor's new round formed, so the new worker "
                       "shared this machine's cores with that teardown" if gone > formed else
                       f"gone {formed - gone:.1f} s before the survivor's new round formed, so not its teardown")
            text += (f". The restart took {restart:.1f} s against {restart_without:.1f} s without leaving; the "
                     f"departing node's agent (exit {gone:.1f} s after SIGTERM, median) was {overlap}; a restart "
                     f"is the floor's work ({floor:.1f} s in this run) and varies with the load on this machine")
        out.append(text)
    return out


def _floor(results: dict[str, Any], case: dict[str, Any]) -> float | None:
    """The floor a case's ratio was taken against: its own run's (``--merge``), else the results'."""
    own = case.get("floor_s")
    if isinstance(own, (int, float)):
        return float(own)
    return median(results.get("floor_s"))


def _met(case: dict[str, Any]) -> bool:
    ratio = case.get("ratio_to_floor")
    return ratio is not None and ratio <= TARGET_RATIO


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} s"
