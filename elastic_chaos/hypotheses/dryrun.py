"""What a run would be, checked without starting anything (``elastic-chaos run ... --dry-run``).

Everything ``execute`` checks before it opens a report folder and starts a job is
checked here the same way: the options sorted into the job, the trial, the
fault, the hypothesis' params (which read a replay's trace) and the platform's
(which read a kubeconfig), then the fault built as the run will build it (its
own checks: a straggler's period against its factor). A bad value is the same
SpecError a real run would raise, before anything starts. This is also the seam
the property-based tests fuzz ``run`` through: the command line up to the point
where a job would start.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from elastic_chaos.faults.api import Fault
from elastic_chaos.hypotheses.api import Hypothesis, Settings, settings
from elastic_chaos.hypotheses.catalog import get


@dataclass(frozen=True)
class Plan:
    """A run as it would start: the hypothesis, its settings, and its fault as built."""

    hypothesis: Hypothesis
    settings: Settings
    fault: Fault | None

    def describe(self) -> list[str]:
        """What would run, in lines for the terminal."""
        s = self.settings
        job = s.job
        lines = [f"hypothesis {self.hypothesis.name}: {self.hypothesis.summary}",
                 f"job: nodes {job.nodes} x {job.nproc_per_node} process(es), rendezvous {job.rdzv.backend.value}, "
                 f"checkpoint every {job.checkpoint_every} steps"
                 + (f", script {' '.join(job.script)}" if job.script else ", the reference trainer"),
                 f"trial: {_fields(s.trial)}"]
        if self.fault is not None:
            lines.append(f"fault {self.fault.name}: {_fields(self.fault)}")
        if s.params is not None:
            lines.append(f"{self.hypothesis.name}: {_fields(s.params)}")
        if s.platform:
            lines.append("platform options: " + ", ".join(f"{k}={v!r}" for k, v in sorted(s.platform.items())))
        b = s.cost.recorded()
        if s.cost.given and b.gpus_per_node is None:
            lines.append("cost of an interruption: not reported (no --gpus-per-node or --instance-type given)")
        elif s.cost.given:
            lines.append(f"cost of an interruption: {b.gpus_per_node} GPU(s) per node, "
                         + (f"${b.gpu_hour_price:g} per GPU-hour ({b.price_source})" if b.gpu_hour_price is not None
                            else "no price (GPU-hours only)")
                         + (f", MTBF {b.mtbf_hours:g} h" if b.mtbf_hours is not None else ""))
        return lines


def plan(name: str, values: Mapping[str, Any], platform: str) -> Plan:
    """The run ``execute(name, values, platform=...)`` would start; raises what it would raise
    before starting (SpecError for a bad value, FaultUnavailable for a fault no class makes on
    ``platform``). Starts nothing, writes nothing."""
    h = get(name)
    s = settings(h, values, platform)
    return Plan(h, s, s.built)


def _fields(obj: Any) -> str:
    shown = [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)
             if f.repr and not f.name.startswith("_")]
    return ", ".join(f"{k}={getattr(v, 'value', v)!r}" for k, v in shown) or "-"
