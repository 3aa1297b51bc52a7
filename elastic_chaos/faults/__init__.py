"""The faults: the contract (``api``), one module per family, and one registry keyed by
kind and platform (``catalog``). The generic faults are handed on here for scenario code."""
from __future__ import annotations

from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.api import Fault, FaultPlan
from elastic_chaos.faults.hang import Freeze, Partition
from elastic_chaos.faults.node import KillDuringCheckpoint, KillNode, ScaleUp, StoreHostLoss, WorkerCrash
from elastic_chaos.faults.slow import HungRank, Straggler
from elastic_chaos.faults.spot import SpotInterruption
from elastic_chaos.faults.store import EtcdOutage

__all__ = ["EtcdOutage", "Fault", "FaultPlan", "FaultRecord", "Freeze", "HungRank", "KillDuringCheckpoint",
           "KillNode", "Partition", "ScaleUp", "SpotInterruption", "StoreHostLoss", "Straggler", "WorkerCrash"]
