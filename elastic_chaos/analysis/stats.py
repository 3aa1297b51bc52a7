"""One statistic over repeated measurements, for every figure that summarises several.

The audit (elastic_chaos.reporting.audits.audit: many runs' recoveries), the replay audit, the storage cost of one
fault (elastic_chaos.analysis.storage: its saves) and the benchmarks (bench/stats.py: repetitions of one case)
all reduce a list of measured values to a few numbers. They share one rule so that a "p50" or a
"median" means the same thing wherever it is printed: **nearest rank, no interpolation** -- the p-th
percentile of n sorted values is the value at rank ceil(p/100 x n) (1-based). Every number shown was
actually measured: p50 of [1, 2, 3, 4] is 2, p95 of 10 values is the largest. Pure functions.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (``p`` in [0, 100]): the value at rank ceil(p/100 x n) of the sorted values;
    None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(p / 100.0 * len(ordered))))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Stat:
    """n, nearest-rank p50 and p95, and the extremes of some measured values (None where there are none)."""

    n: int
    p50: float | None
    p95: float | None
    max: float | None
    min: float | None = None

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat:
        return cls(len(values), percentile(values, 50), percentile(values, 95), max(values, default=None),
                   min(values, default=None))

    def to_json(self) -> dict[str, Any]:
        """The audit's form (report ``audit --json``): n, p50, p95, max."""
        return {"n": self.n, "p50": self.p50, "p95": self.p95, "max": self.max}
