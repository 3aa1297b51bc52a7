"""The catalog: importing this module registers every hypothesis the toolkit ships
(``elastic-chaos faults`` lists them; ``elastic-chaos run NAME`` and the scenarios in
``scenarios/`` run them). A new hypothesis is one decorated function in one of these
modules (or a new module imported here)."""
from __future__ import annotations

from elastic_chaos.errors import SpecError
from elastic_chaos.hypotheses import (
    corruption,
    grace,
    growth,
    losses,
    network,
    pods,
    replay,
    savepoints,
    shards,
    silent,
    slow,
    stale,
    storage,
)
from elastic_chaos.hypotheses.api import HYPOTHESES, Hypothesis

__all__ = ["HYPOTHESES", "corruption", "get", "grace", "growth", "losses", "network", "pods", "replay", "savepoints",
           "shards", "silent", "slow", "stale", "storage"]


def get(name: str) -> Hypothesis:
    """The hypothesis ``name``; SpecError listing the catalog when there is none."""
    try:
        return HYPOTHESES[name]
    except KeyError:
        raise SpecError(f"unknown fault {name!r}; `elastic-chaos faults` lists them "
                        f"({', '.join(sorted(HYPOTHESES))})") from None
