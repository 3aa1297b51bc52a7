"""The replay table: each preemption of a replayed trace, when it was due and what it hit."""
from __future__ import annotations

from typing import Any


def rows(replay: dict[str, Any] | None) -> list[list[str]]:
    """A header and one row per preemption of report.json's ``replay`` block; [] without one."""
    if not replay or not replay.get("rows"):
        return []
    start = float(replay.get("started_at") or 0.0)
    out = [["#", "trace offset", "due", "late", "hit", "trace node", "trace group"]]
    for r in replay["rows"]:
        due = r.get("due_at")
        late = r.get("late_s")
        hit = r.get("node") if r.get("outcome") == "injected" else f"skipped: {r.get('reason', '')}"
        out.append([str(r.get("index", "")), f"{float(r.get('offset_s') or 0):g}s",
                    f"+{float(due) - start:.1f}s" if isinstance(due, (int, float)) else "-",
                    f"{float(late):+.2f}s" if isinstance(late, (int, float)) else "-", str(hit),
                    str(r.get("trace_node") or "-"), str(r.get("trace_group") or "-")])
    return out


def title(replay: dict[str, Any]) -> str:
    trace = replay.get("trace") or {}
    where = trace.get("file") or f"generated {trace.get('generator', '')} " + " ".join(
        f"{k}={v}" for k, v in trace.items() if k != "generator")
    goodput = replay.get("goodput")
    return (f"replayed trace: {where} (compress {replay.get('compress')}, by {replay.get('by')}): "
            f"{replay.get('injected')} injected, {replay.get('skipped')} skipped; goodput over the replay "
            + (f"{goodput:.2f}" if isinstance(goodput, (int, float)) else "unknown")
            + f", a checkpoint every {replay.get('checkpoint_every')} steps")
