"""RESULTS.md's sharded-saves section: what a DCP save costs the job, sync against async, the file format beside.

bench/dcp.py measures (``python -m bench --dcp``); this renders its block.
"""
from __future__ import annotations

from typing import Any

from bench.render import Plots


def markdown(results: dict[str, Any], plots: Plots) -> list[str]:
    """The section (empty when not measured)."""
    dcp = results.get("dcp") or {}
    if not dcp:
        return []
    lines = ["## Sharded saves: sync vs async DCP", "",
             f"Measured by `{dcp.get('command', 'python -m bench --dcp')}` on {dcp.get('date', '?')} (load average "
             f"{dcp.get('load_avg_1m')} at the start; the machine is shared: indicative). The reference trainer on "
             f"gloo, {dcp.get('nodes', 2)} nodes of one rank, steps unpadded (`--step-time 0`), a save every "
             f"{_cell(dcp.get('checkpoint_every'))} steps, {_cell(dcp.get('saves_asked'))} saves per mode after a "
             "warm-up. *Save*: the job's own started -> saved (an async save is said saved at the first step "
             "boundary after it is done). *Stall*: the step that holds a save (rank 0's step N -> N+1 after the "
             "save of step N) against the median of every other step. An async save's step holds the staging (its "
             "state copied before the background write) and the wait for the previous save, if any; its save time "
             "runs on while training competes for the same cores. A file save's step also holds what the trainer "
             "does outside started -> saved (building the state, pruning after the save).", "",
             "| mode | saves | not saved | save p50 s | save max s | step p50 s | step with a save p50 s | "
             "stall p50 s | longest step with a save s | restarts |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['mode']} | {_cell(r.get('saves'))} | {_cell(r.get('unfinished'))} | "
              f"{_cell(r.get('save_p50_s'))} | {_cell(r.get('save_max_s'))} | {_cell(r.get('step_p50_s'))} | "
              f"{_cell(r.get('save_step_p50_s'))} | "
              f"{_cell(r.get('stall_p50_s'))} | {_cell(r.get('stall_step_max_s'))} | {_cell(r.get('restarts'))} |"
              for r in dcp.get("modes") or []]
    return [*lines, ""]


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:g}" if isinstance(v, float) else str(v)
