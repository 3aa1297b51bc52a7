"""Fault catalog. ``FAULTS`` maps each CLI name to its class."""
from __future__ import annotations

from chaos.faults.api import Fault, FaultPlan, FaultRecord
from chaos.faults.node import KillNode

FAULTS: dict[str, type[Fault]] = {
    KillNode.kind: KillNode,
}

__all__ = ["FAULTS", "Fault", "FaultPlan", "FaultRecord", "KillNode"]
