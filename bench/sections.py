"""RESULTS.md's sections that read only results.json: imported by bench/report.py, and by nothing
that writes results.json (bench/soak.py, bench/gpu_runs.py and bench/device_runs.py measure and
write; their sections are here so that report.py does not import them back)."""
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


def device_runs_markdown(results: Mapping[str, Any]) -> list[str]:
    """RESULTS.md's section for the lent machine's figures (nothing when there are none)."""
    block = results.get("device_runs")
    if not block:
        return []
    lines = ["## On a lent 16-core machine", "",
             f"{block['device']}, {block['date']}. Other cores and another torch build than every figure above: "
             "kept apart, never fitted with them, one entry per run.", ""]
    scale = block.get("scale") or []
    if scale:
        from bench.rdzv_scale import size_table
        lines += ["### Rendezvous at scale beyond this VM", "",
                  f"`{block.get('scale_command')}`: the harness of the section above, the same episodes, "
                  f"{scale[0].get('processes')} host processes.", ""]
        lines += size_table(scale[0]["backend"], scale)
    runs = block.get("spot") or []
    if runs:
        keys = sorted({k.rsplit("/", 1)[0] for r in runs for k in r["cases"]})
        lines += ["### Spot interruption against the floor", "",
                  f"`{block.get('spot_command')}`, once per run; each ratio against the floor of its own run "
                  "(spawn + import of this torch build + process-group init + load + one step).", "",
                  "| run | floor s | " + " | ".join(f"{k} without | {k} with --leave-on-sigterm" for k in keys)
                  + " |", "|---|---|" + "---|---|" * len(keys)]
        for i, r in enumerate(runs, 1):
            cells = []
            for k in keys:
                for side in ("without", "with"):
                    c = r["cases"].get(f"{k}/{side}") or {}
                    cells.append(f"{c['recovery_s']:.1f} s = {c['ratio']}x (rendezvous {c['rendezvous']:.1f} s)"
                                 if c.get("ratio") is not None and c.get("recovery_s") is not None
                                 and c.get("rendezvous") is not None else "-")
            lines.append(f"| {i} | {r['floor_s']} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [f"- {n}" for n in block.get("notes") or []]
    return lines + ([""] if block.get("notes") else [])
