"""elastic-chaos: chaos and resilience testing for elastic PyTorch training.

The public front: start a job, inject faults, read what recovery cost::

    from chaos import ChaosRun, JobSpec, KillNode

    with ChaosRun(Path("reports/try")) as run:
        run.start(JobSpec(nodes="1:2", checkpoint_every=20))
        run.wait_for_step(50)
        fault = run.inject(KillNode())
        recovery = run.wait_for_recovery(fault)
        print(recovery.lost_steps, recovery.phases)
"""
from __future__ import annotations

from chaos.analysis.recovery import Recovery
from chaos.analysis.verdict import Verdict
from chaos.errors import (
    ChaosError,
    EtcdError,
    InjectionFailed,
    PlatformError,
    RecoveryTimeout,
    SetupError,
    SpecError,
    WatcherDied,
)
from chaos.events import Event, Timeline
from chaos.faults import Fault, FaultPlan, FaultRecord, KillNode
from chaos.reporting.result import RunResult
from chaos.runner.run import ChaosRun, JobFailed
from chaos.spec import JobSpec, RdzvBackend, RendezvousSpec

__all__ = [
    "ChaosError", "ChaosRun", "EtcdError", "Event", "Fault", "FaultPlan", "FaultRecord",
    "InjectionFailed", "JobFailed", "JobSpec", "KillNode", "PlatformError", "RdzvBackend", "Recovery",
    "RecoveryTimeout", "RendezvousSpec", "RunResult", "SetupError", "SpecError", "Timeline", "Verdict",
    "WatcherDied",
]
