"""RESULTS.md's section for figures measured on another machine's cores (bench/other_cores.py), kept apart.

Other cores and another torch build than every other figure: never fitted with them, one entry per run. The
rendezvous sizes are rendered with the sweep's own table (bench/render/rdzv.py).
"""
from __future__ import annotations

from typing import Any

from bench.rdzv.records import SizeResult
from bench.render import Plots
from bench.render.rdzv import size_table


def markdown(results: dict[str, Any], plots: Plots) -> list[str]:
    """The section for another machine's figures (nothing when there are none)."""
    block = results.get("device_runs")
    if not block:
        return []
    lines = ["## On a lent 16-core machine", "",
             f"{block['device']}, {block['date']}. Other cores and another torch build than every figure above: "
             "kept apart, never fitted with them, one entry per run.", ""]
    scale = [SizeResult.from_json(s) for s in block.get("scale") or ()]
    if scale:
        lines += ["### Rendezvous at scale beyond this VM", "",
                  f"`{block.get('scale_command')}`: the harness of the section above, the same episodes, "
                  f"{scale[0].processes} host processes.", ""]
        lines += size_table(scale[0].backend, scale)
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
