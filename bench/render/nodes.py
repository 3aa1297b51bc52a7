"""RESULTS.md's "Scale" section: the real torchrun jobs of N local nodes (bench/local_nodes.py) and findings."""
from __future__ import annotations

from typing import Any

from bench.local_nodes import NodesRun
from bench.render import Plots


def _shown(run: NodesRun, name: str) -> Any:
    """A field as the table shows it: '-' when the run never got that far."""
    return getattr(run, name) if run.has(name) else "-"


def markdown(results: dict[str, Any], plots: Plots) -> list[str]:
    runs = [NodesRun.from_json(r) for r in results.get("scale") or ()]
    if not runs:
        return []
    lines = ["## Scale", "", "| nodes | formation s | recovery s | memory per node MB | load avg | result |",
             "|---|---|---|---|---|---|"]
    for s in runs:
        lines.append(f"| {s.nodes} | {_shown(s, 'formation_s')} | {_shown(s, 'recovery_s')} | "
                     f"{_shown(s, 'memory_per_node_mb')} | {_shown(s, 'load_avg_1m')} | "
                     f"{'ok' if s.ok else s.error if s.has('error') else 'failed'} |")
    return lines + [""] + [f"- {f}" for f in results.get("scale_findings", [])] + [""]
