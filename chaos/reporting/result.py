"""A run's result, typed: what report.json holds, written and read back.

The runner builds a :class:`RunResult` when a run closes (``ChaosRun.result()``)
and chaos.reporting.report writes report.json from it; chaos.reporting.load reads
report.json back into one. Reporting therefore never sees the run object.

report.json, schema version 1 (stable: other tools read it), top level:
``schema_version``, ``scenario``, ``platform``, ``job`` (chaos.spec.JobSpec),
``verdict`` {``passed``, ``reasons``, ``checks``: each {``name``, ``ok``,
``reason``}}, ``faults`` (each: ``kind``, ``target``, ``injected_at``, ``hit``
and the fault's detail, and ``metrics``: every metric of
chaos.analysis.recovery.Recovery by its key, ``phases``, ``missing``,
``restart_budget``, ``overtaken``; a straggler's ``throughput`` and a hung rank's
``hang``: chaos.analysis.throughput, chaos.analysis.hang), ``goodput``
(chaos.analysis.recovery.goodput), ``replay`` (a replayed trace: chaos.analysis.replay;
null otherwise), ``split_brain`` (periods two worlds trained at once: chaos.analysis.invariants),
``samples`` (exactly-once accounting: accounted, exactly_once,
committed/rolled-back steps, duplicate and gap counts, summary),
``observation`` (a user script's job only, else null: where progress,
checkpoint saves and resumes were read from, and notes on what was inferred or
could not be measured: chaos.analysis.observation), ``started_at``,
``finished_at``, ``timeline`` and ``node_logs`` (paths relative to the report
folder), ``placement`` (the local platform on a GPU machine: how nodes got GPUs,
chaos.platforms.local.gpus; null otherwise). Each fault's ``metrics`` also hold
``path`` (restart / stall), ``not_applicable`` (phase -> why) and ``notes``.
Additive changes keep the version; renames bump it.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from chaos.analysis.hang import HangDetection
from chaos.analysis.hang import of_fault as hang_of
from chaos.analysis.invariants import SplitBrain
from chaos.analysis.recovery import Recovery
from chaos.analysis.samples import SampleAccount
from chaos.analysis.throughput import Throughput
from chaos.analysis.throughput import of_fault as throughput_of
from chaos.analysis.verdict import Verdict
from chaos.errors import SpecError
from chaos.events import Event, RunnerEv, last, payload_json
from chaos.faults.api import FaultRecord
from chaos.spec import JobSpec

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
REPORT = "report.json"
TIMELINE = "timeline.jsonl"
NO_VERDICT = {"passed": False, "reasons": ["no verdict was reached"], "checks": []}
"""report.json's ``verdict`` for a run that reached none."""


@dataclass(frozen=True)
class FaultResult:
    """One injected (or, in a watch, observed) fault and what it cost."""

    record: FaultRecord
    recovery: Recovery
    throughput: Throughput | None = None
    """A straggler's step rates before, during and after, and whom the job waited for
    (report.json's ``throughput``; chaos.analysis.throughput)."""
    hang: HangDetection | None = None
    """A hung rank's detection evidence (report.json's ``hang``; chaos.analysis.hang)."""

    @classmethod
    def measure(cls, record: FaultRecord, recovery: Recovery, events: Sequence[Event]) -> FaultResult:
        """``record`` with its Recovery and the metrics of its own kind, from ``events``."""
        args = (events, record.kind, record.target, record.injected_at, record.detail)
        pg_timeout = record.detail.get("pg_timeout_s")
        return cls(record, recovery, throughput_of(*args),
                   hang_of(*args, float(pg_timeout) if isinstance(pg_timeout, (int, float)) else None))

    def to_json(self) -> dict[str, Any]:
        out = self.record.to_json()
        out.setdefault("hit", None)  # what a watch's observed loss writes: nothing was hit by us
        out = {**out, "metrics": self.recovery.to_json()}
        if self.throughput is not None:
            out["throughput"] = self.throughput.to_json()
        if self.hang is not None:
            out["hang"] = self.hang.to_json()
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> FaultResult:
        record = FaultRecord.from_json(raw)
        metrics = raw.get("metrics")
        recovery = Recovery.from_json(record.kind, record.target, record.injected_at,
                                      metrics if isinstance(metrics, dict) else {})
        rates, hung = raw.get("throughput"), raw.get("hang")
        return cls(record, recovery,
                   Throughput.from_json(record.target, record.injected_at, rates)
                   if isinstance(rates, dict) else None,
                   HangDetection.from_json(record.target, record.injected_at, hung)
                   if isinstance(hung, dict) else None)


@dataclass(frozen=True)
class Samples:
    """report.json's ``samples``: the exactly-once account in counts (chaos.analysis.samples)."""

    accounted: bool
    exactly_once: bool
    committed_steps: int
    rolled_back_steps: int
    duplicates: int
    gaps: int
    summary: str

    @classmethod
    def of(cls, acc: SampleAccount) -> Samples:
        return cls(acc.accounted, acc.exactly_once, acc.committed_steps, acc.rolled_back_steps,
                   len(acc.duplicates), len(acc.gaps), acc.summary())

    def to_json(self) -> dict[str, Any]:
        return {"accounted": self.accounted, "exactly_once": self.exactly_once,
                "committed_steps": self.committed_steps, "rolled_back_steps": self.rolled_back_steps,
                "duplicates": self.duplicates, "gaps": self.gaps, "summary": self.summary}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Samples:
        return cls(raw.get("accounted") is True, raw.get("exactly_once") is True,
                   _int(raw.get("committed_steps")), _int(raw.get("rolled_back_steps")),
                   _int(raw.get("duplicates")), _int(raw.get("gaps")), str(raw.get("summary") or ""))


@dataclass(frozen=True)
class RunResult:
    """Everything report.json records about one run (the module docstring has the schema).
    ``None`` is "not known": no verdict reached, no job spec, a watch that did not
    account samples."""

    scenario: str | None
    platform: str | None
    job: JobSpec | None
    verdict: Verdict | None
    faults: tuple[FaultResult, ...] = ()
    goodput: float | None = None
    replay: dict[str, Any] | None = None
    """A replayed trace: its source and parameters, each preemption, its goodput
    (chaos.analysis.replay.replay_summary); None for any other run."""
    split_brains: tuple[SplitBrain, ...] | None = None
    samples: Samples | None = None
    observation: dict[str, Any] | None = None
    """chaos.analysis.observation.summarize's block (a script job only)."""
    started_at: float | None = None
    """Seconds since the epoch (report.json keeps milliseconds)."""
    finished_at: float | None = None
    node_logs: dict[str, str] = field(default_factory=dict)
    """Node name -> its log, relative to the report folder where it lies inside it."""
    timeline: str = TIMELINE
    placement: dict[str, Any] | None = None
    """How the local platform placed the job on GPUs (mode, slices, note); None: no placement."""

    @property
    def passed(self) -> bool:
        return self.verdict is not None and self.verdict.passed

    @property
    def progress_unit(self) -> str:
        """What the job's progress counts (a script's ``--unit``; ``step`` otherwise)."""
        return str((self.observation or {}).get("unit") or "step")

    @property
    def recoveries(self) -> list[Recovery]:
        return [f.recovery for f in self.faults]

    def to_json(self) -> dict[str, Any]:
        """report.json's object."""
        return {
            "schema_version": SCHEMA_VERSION,
            "scenario": self.scenario,
            "platform": self.platform,
            "job": self.job.to_json() if self.job else None,
            "verdict": self.verdict.to_json() if self.verdict else dict(NO_VERDICT),
            "faults": [f.to_json() for f in self.faults],
            "goodput": self.goodput,
            "replay": self.replay,
            "split_brain": None if self.split_brains is None else [b.to_json() for b in self.split_brains],
            "samples": self.samples.to_json() if self.samples else None,
            "observation": self.observation,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "timeline": self.timeline,
            "node_logs": dict(self.node_logs),
            "placement": self.placement,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RunResult:
        """report.json's object read back. Tolerant of older and partial files: a block
        that is absent (or not the shape this version writes) reads as not known, and
        a job spec this version cannot build reads as None (the folder keeps the original)."""
        faults = raw.get("faults")
        brains = raw.get("split_brain")
        samples = raw.get("samples")
        verdict = raw.get("verdict")
        observation = raw.get("observation")
        logs = raw.get("node_logs")
        return cls(
            scenario=_str(raw.get("scenario")), platform=_str(raw.get("platform")), job=_job(raw.get("job")),
            verdict=Verdict.from_json(verdict) if isinstance(verdict, dict) else None,
            faults=tuple(FaultResult.from_json(f) for f in faults or [] if isinstance(f, dict)),
            goodput=_float(raw.get("goodput")),
            replay=raw.get("replay") if isinstance(raw.get("replay"), dict) else None,
            split_brains=(tuple(SplitBrain.from_json(b) for b in brains if isinstance(b, dict))
                          if isinstance(brains, list) else None),
            samples=Samples.from_json(samples) if isinstance(samples, dict) else None,
            observation=observation if isinstance(observation, dict) else None,
            started_at=_float(raw.get("started_at")), finished_at=_float(raw.get("finished_at")),
            node_logs={str(k): str(v) for k, v in logs.items()} if isinstance(logs, dict) else {},
            timeline=str(raw.get("timeline") or TIMELINE),
            placement=raw.get("placement") if isinstance(raw.get("placement"), dict) else None)


def placement_of(events: list[Event]) -> dict[str, Any] | None:
    """The GPU placement the local platform recorded at start (runner/gpu_placement), if any."""
    e = last(events, RunnerEv.GPU_PLACEMENT)
    return payload_json(e.data) if e is not None else None


def _job(raw: Any) -> JobSpec | None:
    if not isinstance(raw, dict):
        return None
    try:
        return JobSpec.from_json(raw)
    except (SpecError, ValueError, TypeError) as exc:
        log.info("report.json's job could not be read as a JobSpec (%s); reading it as unknown", exc)
        return None


def _float(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _int(v: Any) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0


def _str(v: Any) -> str | None:
    return None if v is None else str(v)
