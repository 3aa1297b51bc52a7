"""Summaries of repeated measurements as results.json keeps them: {median, min, max, n}.

One statistic for the whole repository: elastic_chaos.analysis.stats.Stat, nearest rank (the audit's rule), so a
bench median is a value that was measured -- with an even count, the lower of the two middle ones, never
their mean (an odd count, as `make bench`'s 5 repetitions, gives the usual median). ``summary`` writes it
in the bench's form, ``median`` reads it back; every bench median goes through these two.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from elastic_chaos.analysis.stats import Stat


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def stat(values: Iterable[float | None]) -> Stat:
    """The Stat of the values that were measured (None: not measured, left out)."""
    return Stat.of([float(v) for v in values if v is not None])


def summary(values: Iterable[float | None]) -> dict[str, Any]:
    """results.json's summary of repetitions, rounded to the millisecond."""
    s = stat(values)
    return {"median": _round(s.p50, 3), "min": _round(s.min, 3), "max": _round(s.max, 3), "n": s.n}


def median_of(values: Iterable[float | None], digits: int = 3) -> float | None:
    """The (nearest-rank) median of the values that were measured, rounded; None when none were."""
    return _round(stat(values).p50, digits)


def median(stat_json: Mapping[str, Any] | None) -> float | None:
    """The median a summary() holds; None when it holds none (or there is no summary)."""
    v = (stat_json or {}).get("median")
    return float(v) if v is not None else None
