"""RESULTS.md's section on our own flakiness: `make soak`'s pass/fail counts and metric spreads per scenario.

The soak (bench/soak.py) measures and writes results.json's ``soak`` block; this renders it.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.render import Plots


def markdown(results: dict[str, Any], plots: Plots) -> list[str]:
    """The soak's section (nothing when results.json has no soak)."""
    soak = results.get("soak")
    if not soak:
        return []
    lines = ["## Our own flakiness (make soak)", "",
             f"The scenario catalog run back to back on {soak.get('machine', '?')}"
             + (" (the local and the cluster catalog side by side, as `.ci/run` runs them)"
                if soak.get("side_by_side") else "")
             + (f", scenarios selected by `-k {soak['keyword']}`" if soak.get("keyword") else "")
             + ". A scenario is **flaky** when it passed in some identical runs and failed in others; "
               "regain and lost steps are every injected fault's (n, min / median / max).", ""]
    if "cluster" not in (soak.get("catalogs") or {}):
        lines += ["No cluster catalog in this soak (it runs as root with `make cluster-up`: "
                  "`make soak SOAK_CLUSTER_RUNS=3`).", ""]
    for name, c in (soak.get("catalogs") or {}).items():
        flaky = c.get("flaky") or []
        lines.append(f"- **{name}** catalog: {c.get('runs')} run(s) of {c.get('scenarios')} scenario(s), "
                     f"{c.get('failures')} failure(s), {len(flaky)} flaky scenario(s)"
                     + (f": {', '.join(f'`{f}`' for f in flaky)}" if flaky else "")
                     + f"; wall {', '.join(f'{w:.0f}' for w in c.get('wall_s') or [])} s; "
                     f"{c.get('date') or soak.get('date', '?')}"
                     + (f", at commit {c.get('commit') or soak['commit']}" if c.get("commit") or soak.get("commit")
                        else "") + ".")
    lines += ["", "| catalog | scenario | passed | failed | skipped | flaky | regain s (n: min / median / max) "
                  "| lost steps (n: min / median / max) |", "|---|---|---|---|---|---|---|---|"]
    for s in soak.get("scenarios") or []:
        m = s.get("metrics") or {}
        lines.append(f"| {s['catalog']} | `{s['scenario'].removeprefix('scenarios/')}` | {s['passed']} | "
                     f"{s['failed']} | {s['skipped']} | {'**yes**' if s['flaky'] else 'no'} | "
                     f"{_cell(m.get('regain'))} | {_cell(m.get('lost_steps'))} |")
    return [*lines, ""]


def _cell(stat: Mapping[str, Any] | None) -> str:
    if not stat or not stat.get("n"):
        return "-"
    return f"{stat['n']}: {stat['min']:.3g} / {stat['median']:.3g} / {stat['max']:.3g}"
