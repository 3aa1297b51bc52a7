"""RESULTS.md's section on goodput under a replayed preemption trace (bench/replay.py's block)."""
from __future__ import annotations

from typing import Any

from bench.render import Plots


def markdown(results: dict[str, Any], plots: Plots) -> list[str]:
    block = results.get("replay")
    lines = ["## Goodput under a replayed trace", ""]
    if not block or not block.get("intervals"):
        return lines + ["Not measured yet: `python -m bench --replay --merge`.", ""]
    lines += [f"Measured {block.get('date')}: "
              f"`{block.get('trace')}` (three EC2 spot interruptions in 26 minutes) replayed at "
              f"`--compress {block.get('compress'):g}` onto the 2-node job (fast preset, replacements on); "
              "goodput over the replay = progress x steady step time / wall time (docs/FAULTS.md, replay).", "",
              "| checkpoint every | goodput | preemptions injected | steps lost per preemption | "
              "median regain_s | verdict |", "|---|---|---|---|---|---|"]
    for every, row in sorted(block["intervals"].items(), key=lambda kv: int(kv[0])):
        lines.append(f"| {every} steps | {row.get('goodput')} | {row.get('injected')} (skipped {row.get('skipped')}) "
                     f"| {', '.join(str(x) for x in row.get('lost_steps') or []) or '-'} | "
                     f"{row.get('regain_s_median')} | {'PASSED' if row.get('passed') else 'FAILED'} |")
    return lines + [""]
