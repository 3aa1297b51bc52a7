"""Fault catalog. ``FAULTS`` maps each CLI name to its class."""
from __future__ import annotations

from chaos.faults.api import Fault, FaultPlan, FaultRecord
from chaos.faults.hang import Freeze, Partition
from chaos.faults.node import KillDuringCheckpoint, KillNode, ScaleUp, StoreHostLoss, WorkerCrash
from chaos.faults.spot import SpotInterruption
from chaos.faults.store import EtcdOutage

FAULTS: dict[str, type[Fault]] = {
    cls.kind: cls
    for cls in (KillNode, SpotInterruption, Partition, Freeze, WorkerCrash, EtcdOutage, ScaleUp,
                KillDuringCheckpoint, StoreHostLoss)
}

__all__ = ["FAULTS", "EtcdOutage", "Fault", "FaultPlan", "FaultRecord", "Freeze", "KillDuringCheckpoint",
           "KillNode", "Partition", "ScaleUp", "SpotInterruption", "StoreHostLoss", "WorkerCrash"]
