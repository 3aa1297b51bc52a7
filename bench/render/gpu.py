"""RESULTS.md's GPU section: `make bench`'s medians on NCCL, and the single runs brought back from a lent GPU.

The medians are bench/gpu.py's (with its findings against the CPU figures); the single runs are
bench/nccl_runs.py's, one row per run: figures to compare with the medians, not medians themselves.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.gpu import findings
from bench.render import Plots
from bench.render.recovery import limit_notes, phase_table
from elastic_chaos.analysis.recovery import PHASES


def markdown(results: dict[str, Any], plots: Plots) -> list[str]:
    block = results.get("gpu")
    lines = ["## On GPU (NCCL)", ""]
    if not block or "recovery" not in block:
        why = (block or {}).get("skipped") or "the last `make bench` predates the GPU benchmarks"
        return lines + [f"Not measured by `make bench`: {why}. `make bench` on a machine with NVIDIA GPUs "
                        "measures the floor and the presets on NCCL here (medians); docs/PRESETS.md has the "
                        "figures taken by hand on one H100 (issue 16).", ""] + single_runs(results)
    fl = block.get("floor_s") or {}
    lines += [f"{block.get('gpus')} x {block.get('device')}, driver {block.get('driver')}, CUDA {block.get('cuda')}. "
              f"Placement: {block.get('placement')}.", "",
              f"Floor on NCCL: median **{fl.get('median')} s** (min {fl.get('min')}, max {fl.get('max')}, "
              f"n={fl.get('n')}).", ""]
    lines += phase_table(block.get("recovery") or {}, {})
    lines += [""] + [f"- {note}" for note in limit_notes(block.get("recovery") or {})]
    lines += ["", "### Findings on GPU", ""] + [f"- {f}" for f in findings(block, results)] + [""]
    return lines + single_runs(results)


def single_runs(results: Mapping[str, Any]) -> list[str]:
    """The lines for the single runs on a lent GPU machine (none: nothing)."""
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
