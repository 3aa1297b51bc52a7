"""One fault registry, keyed by kind and by the platform it is made on.

Most faults are made through the Platform contract (kill a node, freeze it,
partition it) and run wherever the platform has the capability; some are made
for one family of platforms (pod deletion on Kubernetes, FIS on AWS). Two
classes may share a kind when they are two ways of making the same thing:
``spot-interruption`` is the metadata stand-in on local nodes and a real FIS
experiment on EKS; :func:`fault_class` picks the one made for the platform.
"""
from __future__ import annotations

import importlib

from elastic_chaos.errors import SpecError
from elastic_chaos.faults.api import Fault

_MODULES = tuple(f"elastic_chaos.faults.{m}" for m in ("node", "spot", "hang", "store", "slow", "storage", "stale",
                                                        "corrupt", "shard", "network", "kubernetes", "aws"))
"""Where fault classes live; imported on first lookup (the AWS and Kubernetes ones
import their clients only when a fault is made)."""


def all_faults() -> list[type[Fault]]:
    """Every concrete fault class, in catalog order."""
    out: list[type[Fault]] = []
    for name in _MODULES:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Fault) and value.__module__ == name \
                    and not value.__name__.startswith("_") and value.name != "abstract" and value not in out:
                out.append(value)
    return out


def runs_on(cls: type[Fault], platform: str) -> bool:
    """Whether ``cls`` is made for ``platform`` (or for any platform)."""
    return not cls.platforms or platform in cls.platforms


def fault_class(kind: str, platform: str) -> type[Fault]:
    """The class that makes ``kind`` on ``platform``: one made for that platform
    first, else one made through the Platform contract. SpecError naming the
    faults of that platform when there is none."""
    candidates = [c for c in all_faults() if c.name == kind and runs_on(c, platform)]
    candidates.sort(key=lambda c: not c.platforms)  # made-for-this-platform first
    if not candidates:
        known = sorted({c.name for c in all_faults() if runs_on(c, platform)})
        elsewhere = sorted({p for c in all_faults() if c.name == kind for p in c.platforms})
        suggest = "kubernetes" if "kubernetes" in elsewhere else (elsewhere or [""])[0]
        hint = f" ({kind} is made on {', '.join(elsewhere)}: --platform {suggest})" if elsewhere else ""
        raise SpecError(f"no fault {kind!r} on the {platform} platform{hint}; its faults: {', '.join(known)}")
    return candidates[0]


def faults_for(platform: str) -> dict[str, type[Fault]]:
    """Every fault kind ``platform`` can be asked for, with the class that makes it there."""
    return {c.name: fault_class(c.name, platform) for c in all_faults() if runs_on(c, platform)}
