"""RESULTS.md's checkpoint storage section: save time per condition, every crash point, the grace period.

bench/storage.py measures (``python -m bench --storage``, root and /dev/fuse); this renders its block.
"""
from __future__ import annotations

from typing import Any

from bench.render import Plots


def markdown(results: dict[str, Any], plots: Plots) -> list[str]:
    """The section (empty when not measured)."""
    st = results.get("storage") or {}
    if not st:
        return []
    lines = ["## Checkpoint storage", ""]
    if st.get("skipped"):
        return [*lines, f"Not measured: {st['skipped']}.", ""]
    lines += [f"Measured by `{st.get('command', 'python -m bench --storage')}` on {st.get('date', '?')} "
              f"(load average {st.get('load_avg_1m')} at the start; the machine is shared: indicative).", ""]
    lines += _cost_table(st.get("save_cost") or []) + _points_table(st.get("crash_points") or {})
    lines += _grace_table(st.get("grace") or [])
    return lines


def _cell(v: Any) -> str:
    return "-" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def _cost_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    out = ["### Save time per condition", "",
           "The reference trainer's save (a ~7 kB checkpoint) as the job timed it (started -> saved, p50/max of "
           "three) and as the volume did (create -> rename, p50); the time storage rules held its operations.", "",
           "| condition | saves | save p50 s | save max s | volume p50 s | stalled s |", "|---|---|---|---|---|---|"]
    out += [f"| {r['condition']} | {r['saves']} | {_cell(r['save_p50_s'])} | {_cell(r['save_max_s'])} | "
            f"{_cell(r['volume_p50_s'])} | {_cell(r['stalled_s'])} |" for r in rows]
    return [*out, ""]


def _points_table(points: dict[str, Any]) -> list[str]:
    if not points:
        return []
    out = ["### Every crash point of a save", "",
           f"{points.get('kills')} kills of the writing node, each held by the storage layer at a point of its "
           f"save: **{points.get('resumed_from_partial')} resumes from a partial checkpoint**, "
           f"{points.get('resumed_from_newest_complete')} from the newest complete one.", "",
           "| run | point | resumed from | lost steps | regain s | newest complete |", "|---|---|---|---|---|---|"]
    out += [f"| {r['run']} | {r['point']} | {_cell(r['resumed_from_step'])} | {_cell(r['lost_steps'])} | "
            f"{_cell(r['regain_s'])} | {'yes' if r['newest_complete'] else 'NO'} |" for r in points.get("rows", [])]
    return [*out, ""]


def _grace_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    out = ["### The grace period in every phase", "",
           "A spot interruption (notice 2 s, then SIGTERM, SIGKILL 10 s later) in each phase; the interrupted "
           "node's last save against its grace period (n/a: it had no worker training when told to go).", "",
           "| phase | storage | saved in time | last save s | grace left s | lost steps |", "|---|---|---|---|---|---|"]
    for r in rows:
        saved = "n/a" if r["expected"] == "n/a" else ("yes" if r["saved_in_time"] else "NO")
        out.append(f"| {r['phase']} | {r['storage']} | {saved} | {_cell(r['last_save_s'])} | "
                   f"{_cell(r['grace_left_s'])} | {_cell(r['lost_steps'])} |")
    return [*out, ""]
