"""Summaries of repeated measurements: {median, min, max, n}."""
from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any


def summary(values: Iterable[float | None]) -> dict[str, Any]:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": round(statistics.median(vals), 3), "min": round(min(vals), 3),
            "max": round(max(vals), 3), "n": len(vals)}
