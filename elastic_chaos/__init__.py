"""elastic-chaos: chaos and resilience testing for elastic PyTorch training.

The public front: start a job, inject faults, read what recovery cost::

    from elastic_chaos import ChaosRun, JobSpec, KillNode

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
    from elastic_chaos.analysis.recovery import Recovery
    from elastic_chaos.analysis.result import RunResult
    from elastic_chaos.analysis.verdict import Verdict
    from elastic_chaos.errors import (
        ChaosError,
        EtcdError,
        InjectionFailed,
        PlatformError,
        RecoveryTimeout,
        SetupError,
        SpecError,
        WatcherDied,
    )
    from elastic_chaos.events import Event, Timeline
    from elastic_chaos.faults import Fault, FaultPlan, FaultRecord, KillNode
    from elastic_chaos.runner.endings import JobFailed
    from elastic_chaos.runner.run import ChaosRun
    from elastic_chaos.spec import JobSpec, RdzvBackend, RendezvousSpec

# Where each public name lives. They are imported on first use, not here: importing a
# subpackage (the local cluster's tooling runs under a bare system python3 as root)
# must not pull in the runner and its libraries.
_HOMES = {
    "Recovery": "elastic_chaos.analysis.recovery", "Verdict": "elastic_chaos.analysis.verdict",
    **{n: "elastic_chaos.errors" for n in ("ChaosError", "EtcdError", "InjectionFailed", "PlatformError",
                                   "RecoveryTimeout", "SetupError", "SpecError", "WatcherDied")},
    "Event": "elastic_chaos.events", "Timeline": "elastic_chaos.events",
    **{n: "elastic_chaos.faults" for n in ("Fault", "FaultPlan", "FaultRecord", "KillNode")},
    "RunResult": "elastic_chaos.analysis.result",
    "ChaosRun": "elastic_chaos.runner.run", "JobFailed": "elastic_chaos.runner.endings",
    **{n: "elastic_chaos.spec" for n in ("JobSpec", "RdzvBackend", "RendezvousSpec")},
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'elastic_chaos' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "ChaosError", "ChaosRun", "EtcdError", "Event", "Fault", "FaultPlan", "FaultRecord",
    "InjectionFailed", "JobFailed", "JobSpec", "KillNode", "PlatformError", "RdzvBackend", "Recovery",
    "RecoveryTimeout", "RendezvousSpec", "RunResult", "SetupError", "SpecError", "Timeline", "Verdict",
    "WatcherDied",
]
