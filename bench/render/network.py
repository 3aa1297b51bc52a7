"""RESULTS.md's network section: step time and recovery against a link's added delay and loss.

bench/network.py measures (``python -m bench --network``, root and iptables); this renders its block.
"""
from __future__ import annotations

from typing import Any

from bench.render import Plots


def markdown(results: dict[str, Any], plots: Plots) -> list[str]:
    """The section (empty when not measured)."""
    net = results.get("network") or {}
    if not net:
        return []
    lines = ["## The network between ranks", ""]
    if net.get("skipped"):
        return [*lines, f"Not measured: {net['skipped']}.", ""]
    pair = " and ".join(net.get("pair") or ["node-0", "node-1"])
    lines += [f"Measured by `{net.get('command', 'python -m bench --network')}` on {net.get('date', '?')} "
              f"(load average {net.get('load_avg_1m')} at the start; the machine is shared: indicative). The "
              f"reference trainer on gloo, 2 nodes, steps unpadded (`--step-time 0`); the link between {pair} "
              f"degraded for {_cell(net.get('window_s'))} s per condition (elastic_chaos.host.links: iptables, "
              "a netfilter-queue delay line, HTB), then clear as long before the next. Round trip and loss are the "
              "probe's across the link once degraded; the step rate is steps over the time they took in the "
              "clear window before and the degraded window, and the step time ratio the one over the other (the "
              "clean link's row shows the machine's own noise).", ""]
    for setting, rows in (net.get("step_time") or {}).items():
        lines += _step_table(setting, rows)
    lines += _recovery_table(net.get("recovery") or [])
    return lines


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v * 100:.2g} %"


def _step_table(setting: str, rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    out = [f"### Step time per degradation, {setting}", "",
           "| condition | round trip ms | loss measured | steps/s before | steps/s degraded | step time ratio | "
           "longest gap s | restarts |", "|---|---|---|---|---|---|---|---|"]
    out += [f"| {r['condition']} | {_cell(r.get('rtt_ms'))} | {_pct(r.get('loss_measured'))} | "
            f"{_cell(r.get('rate_before'))} | {_cell(r.get('rate_during'))} | {_cell(r.get('step_time_ratio'))} | "
            f"{_cell(r.get('longest_gap_s'))} | {_cell(r.get('restarts'))} |" for r in rows]
    return [*out, ""]


def _recovery_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    out = ["### Recovery across a degraded link, fast preset", "",
           "3 nodes; node-0's link with node-1 degraded, then node-2 killed and replaced (the local platform's "
           "default): the world re-forms at 3 and resumes across the degraded link. Regain is the kill to the "
           "first step past the step before it.", "",
           "| condition | regain s | rendezvous s | lost steps | world size after |", "|---|---|---|---|---|"]
    out += [f"| {r['condition']} | {_cell(r.get('regain_s'))} | {_cell(r.get('rendezvous_s'))} | "
            f"{_cell(r.get('lost_steps'))} | {_cell(r.get('world_size_after'))} |" for r in rows]
    return [*out, ""]
