"""The throughput table: a straggler's step rates, beside the recovery table.

A slow node is not a failure: nothing is detected, re-formed or restarted, so
the recovery table has nothing to say about it. Its columns are the metrics
of chaos.analysis.throughput declared with ``table=True``, as the recovery
table's are Recovery's.
"""
from __future__ import annotations

from collections.abc import Sequence

from chaos.analysis.throughput import METRICS, Throughput


def rows(found: Sequence[tuple[str, Throughput]]) -> list[list[str]]:
    """A header and one row per (fault kind, Throughput); [] when there is none."""
    if not found:
        return []
    shown = [m for m in METRICS if m.table]
    out = [["fault", "target", "factor", *(m.label for m in shown)]]
    for kind, r in found:
        out.append([kind, str(r.target), f"{r.factor:g}x" if r.factor else "-",
                    *(m.format(getattr(r, m.key)) for m in shown)])
    return out
