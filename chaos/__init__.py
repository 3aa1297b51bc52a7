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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chaos.analysis.recovery import Recovery
    from chaos.analysis.result import RunResult
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
    from chaos.runner.run import ChaosRun, JobFailed
    from chaos.spec import JobSpec, RdzvBackend, RendezvousSpec

# Where each public name lives. They are imported on first use, not here: importing a
# subpackage (the local cluster's tooling runs under a bare system python3 as root)
# must not pull in the runner and its libraries.
_HOMES = {
    "Recovery": "chaos.analysis.recovery", "Verdict": "chaos.analysis.verdict",
    **{n: "chaos.errors" for n in ("ChaosError", "EtcdError", "InjectionFailed", "PlatformError",
                                   "RecoveryTimeout", "SetupError", "SpecError", "WatcherDied")},
    "Event": "chaos.events", "Timeline": "chaos.events",
    **{n: "chaos.faults" for n in ("Fault", "FaultPlan", "FaultRecord", "KillNode")},
    "RunResult": "chaos.analysis.result", "ChaosRun": "chaos.runner.run", "JobFailed": "chaos.runner.run",
    **{n: "chaos.spec" for n in ("JobSpec", "RdzvBackend", "RendezvousSpec")},
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'chaos' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "ChaosError", "ChaosRun", "EtcdError", "Event", "Fault", "FaultPlan", "FaultRecord",
    "InjectionFailed", "JobFailed", "JobSpec", "KillNode", "PlatformError", "RdzvBackend", "Recovery",
    "RecoveryTimeout", "RendezvousSpec", "RunResult", "SetupError", "SpecError", "Timeline", "Verdict",
    "WatcherDied",
]
