"""RESULTS.md's sections that read only results.json: imported by bench/report.py, and by nothing
that writes results.json (bench/soak.py and bench/gpu_runs.py measure and write; their sections
are here so that report.py does not import them back)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PHASES = ("detect", "exit", "shutdown", "rendezvous", "restart", "retrain", "stall")


def soak_markdown(results: Mapping[str, Any]) -> list[str]:
    """The soak's section of RESULTS.md (nothing when results.json has no soak)."""
    soak = results.get("soak")
    if not soak:
        return []
    lines = ["## Our own flakiness (make soak)", "",
             f"The scenario catalog run back to back on {soak.get('machine', '?')}"
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


# -- the command ------------------------------------------------------------------------------


def gpu_runs_markdown(results: Mapping[str, Any]) -> list[str]:
    """RESULTS.md's lines for the single GPU runs (none: nothing)."""
    block = results.get("gpu_runs")
    if not block:
        return []
    lines = ["### One run each on a lent GPU machine", "",
             f"{block['device']}; `{block['command']}`, {block['date']}. One run per row (a device lease is "
             "minutes): compare with the CPU medians above, not as medians.", "",
             "| run | verdict | run s | " + " | ".join(PHASES) + " | regain | lost steps | world size |",
             "|---|---|---|" + "---|" * len(PHASES) + "---|---|---|"]
    for run in block["runs"]:
        verdict = "PASSED" if run["passed"] else "FAILED"
        for f in run["faults"] or [{}]:
            ph = f.get("phases") or {}
            cells = [f"{ph[p]:.1f}" if isinstance(ph.get(p), (int, float)) else "n/a" for p in PHASES]
            regain = f.get("regain_s")
            world = f"{f.get('world_size_before')} -> {f.get('world_size_final')}" if f else ""
            lines.append(f"| {run['name']} ({f.get('kind', run['scenario'])}) | {verdict} | {run['run_s']} | "
                         + " | ".join(cells) + f" | {regain:.1f} | {f.get('lost_steps')} | {world} |"
                         if isinstance(regain, (int, float)) else
                         f"| {run['name']} | {verdict} | {run['run_s']} | " + " | ".join(cells) + " | n/a | | |")
    notes = block.get("notes") or []
    return lines + [""] + [f"- {n}" for n in notes] + ([""] if notes else [])
