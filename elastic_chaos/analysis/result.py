"""A run's result, typed: measured once from the timeline, written as report.json, read back the same.

``build_result`` measures every metric group (elastic_chaos.analysis.groups) of every fault
and of the run from the events; ``ChaosRun.close`` calls it with what it knows
(verdict, job, the records of the faults it injected), and so does the
reconstruction of a crashed run's folder from its timeline alone. The renderers
take the result from memory; only ``elastic-chaos report DIR`` and ``audit`` read
a folder back (elastic_chaos.reporting.load), through ``RunResult.from_json``.

report.json, schema version 2 (stable: other tools read it), top level:
``schema_version``, ``scenario``, ``platform``, ``job`` (elastic_chaos.spec.JobSpec),
``verdict`` {``passed``, ``reasons``, ``checks``: each {``name``, ``ok``,
``reason``}}, ``faults`` (each: ``kind``, ``target``, ``injected_at``, ``hit``
and the fault's detail, and one block per metric group that applies to it: the
recovery's ``metrics`` (every metric of elastic_chaos.analysis.recovery.Recovery by its
key, ``phases``, ``missing``, ``restart_budget``, ``overtaken``, ``path``,
``not_applicable``, ``notes``), a straggler's ``throughput``, a hung rank's
``hang``), ``goodput`` (elastic_chaos.analysis.goodput.goodput), one block per run group
(``replay``: a replayed trace, elastic_chaos.analysis.replay; null otherwise),
``split_brain`` (periods two worlds trained at once: elastic_chaos.analysis.invariants),
``samples`` (exactly-once accounting: accounted, exactly_once, committed/rolled-back
steps, duplicate and gap counts, summary), ``observation`` (a user script's job
only, else null: elastic_chaos.analysis.observation.ScriptObservation), ``started_at``,
``finished_at``, ``timeline`` and ``node_logs`` (paths relative to the report
folder), ``placement`` (the local platform on a GPU machine: how nodes got GPUs;
null otherwise), ``threads`` (the local platform: OMP_NUM_THREADS set or advised because
the nodes' threads would oversubscribe the cores, elastic_chaos.events.runner_events.Threads;
null otherwise), ``clock_offsets`` (node -> seconds its clock was off the runner's, where its log
times were moved onto the runner's clock: elastic_chaos.watchers.clocks; {} otherwise), ``final_state``
(``--compare-final``'s comparison of the job's final checkpoint with a clean reference's, and which
reference: elastic_chaos.analysis.final_state.FinalState.to_json; null where none was made). Additive
changes keep the version; renames bump it.

Version 2 renamed the recovery phase ``replay`` (the steps trained again) to
``retrain``: ``replay`` is the fault that replays a preemption trace. Version 1
files read as version 2.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from elastic_chaos.analysis import recovery_analysis as analysis
from elastic_chaos.analysis.final_state import FinalState
from elastic_chaos.analysis.final_state import parse as parse_final_state
from elastic_chaos.analysis.goodput import goodput
from elastic_chaos.analysis.groups import FaultGroup, FaultMark, GroupValue, RunGroup, RunMark
from elastic_chaos.analysis.invariants import SplitBrain, split_brains
from elastic_chaos.analysis.observation import ScriptObservation
from elastic_chaos.analysis.recovery import Recovery
from elastic_chaos.analysis.registry import fault_groups, measure_fault, measure_run, run_groups
from elastic_chaos.analysis.samples import SampleAccount, account_samples
from elastic_chaos.analysis.verdict import Verdict
from elastic_chaos.errors import SpecError
from elastic_chaos.events import Event, FaultEv, RunnerEv, first, last, node_name, of
from elastic_chaos.events.payload import PayloadError
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.events.runner_events import GpuPlacement, Threads
from elastic_chaos.spec import JobSpec

log = logging.getLogger(__name__)
V = TypeVar("V", bound=GroupValue)

SCHEMA_VERSION = 2
REPORT = "report.json"
TIMELINE = "timeline.jsonl"
NO_VERDICT = {"passed": False, "reasons": ["no verdict was reached"], "checks": []}
"""report.json's ``verdict`` for a run that reached none."""
RENAMED_PHASES = {"replay": "retrain"}
"""Version 1 phase names -> version 2."""


@dataclass(frozen=True)
class FaultResult:
    """One injected (or, in a watch, observed) fault and what it cost: each metric group that
    applies to it, by group name (``recovery`` always)."""

    record: FaultRecord
    measured: Mapping[str, Any]

    @property
    def recovery(self) -> Recovery:
        value: Recovery = self.measured["recovery"]
        return value

    def group(self, group: FaultGroup[V]) -> V | None:
        """What ``group`` measured on this fault (None: it does not apply, or measured nothing):
        ``fault.group(THROUGHPUT).drop``."""
        value: V | None = self.measured.get(group.name)
        return value

    @property
    def fault(self) -> str:
        """The fault's name (``kill-node``)."""
        return self.record.fault

    @property
    def target(self) -> str | None:
        return self.record.target

    @property
    def injected_at(self) -> float:
        return self.record.injected_at

    @property
    def measured_from(self) -> float:
        """When this fault's recovery figures start (Recovery.measured_from): the fault, or the
        interruption notice its node acted on before it."""
        return self.recovery.measured_from

    @property
    def phases(self) -> dict[str, float | None]:
        """The recovery phases that apply to this fault, in order (None: not observed)."""
        return self.recovery.applicable_phases()

    @property
    def observed(self) -> bool:
        """Seen by a passive watch (timed at the lost node's last heartbeat), not injected."""
        return self.record.detail.get("observed") is True

    def to_json(self) -> dict[str, Any]:
        out = self.record.to_json()
        out.setdefault("hit", None)  # what a watch's observed loss writes: nothing was hit by us
        for g in fault_groups():
            value = self.measured.get(g.name)
            if value is not None:
                out[g.key] = value.to_json()
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> FaultResult:
        record = FaultRecord.from_json(raw)
        mark = FaultMark(record.fault, record.target, record.injected_at, record.detail)
        measured = {g.name: g.read(mark, raw[g.key]) for g in fault_groups()
                    if g.read is not None and isinstance(raw.get(g.key), dict)}
        measured.setdefault("recovery", Recovery.from_json(record.fault, record.target, record.injected_at, {}))
        return cls(record, measured)


@dataclass(frozen=True)
class Samples:
    """report.json's ``samples``: the exactly-once account in counts (elastic_chaos.analysis.samples)."""

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
    measured: Mapping[str, Any] = field(default_factory=dict)
    """Each run group's value by group name (a replayed trace: ``replay``)."""
    split_brains: tuple[SplitBrain, ...] | None = None
    samples: Samples | None = None
    observation: ScriptObservation | None = None
    """What could be seen of a user's script (a script job only)."""
    started_at: float | None = None
    """Seconds since the epoch (report.json keeps milliseconds)."""
    finished_at: float | None = None
    node_logs: dict[str, str] = field(default_factory=dict)
    """Node name -> its log, relative to the report folder where it lies inside it."""
    timeline: str = TIMELINE
    placement: GpuPlacement | None = None
    """How the local platform placed the job on GPUs (mode, slices, note); None: no placement."""
    threads: Threads | None = None
    """How the local platform fitted the nodes' threads to the cores, when they would have
    oversubscribed them (runner/threads); None: nothing to say."""
    clock_offsets: Mapping[str, float] = field(default_factory=dict)
    """Node -> how far its clock was off the runner's (its clock minus the runner's, seconds), where its
    stamped log times were moved onto the runner's clock (elastic_chaos.watchers.clocks); empty: none was."""
    log_utc_offset_s: float | None = None
    """The UTC offset (seconds) of the zone the nodes' agents wrote their log times in, as the run knew it
    (pods: 0; local nodes: this machine's zone then). None in reports written before 0.2: the platform's
    own zone is assumed (elastic_chaos.reporting.render.log_timezone)."""
    final_state: FinalState | None = None
    """``--compare-final``'s comparison and its reference (None: none was made)."""

    @property
    def passed(self) -> bool:
        return self.verdict is not None and self.verdict.passed

    @property
    def progress_unit(self) -> str:
        """What the job's progress counts (a script's ``--unit``; ``step`` otherwise)."""
        return self.observation.unit if self.observation is not None else "step"

    @property
    def recoveries(self) -> list[Recovery]:
        return [f.recovery for f in self.faults]

    def group(self, group: RunGroup[V]) -> V | None:
        """What the run group ``group`` measured (None: nothing): ``result.group(REPLAY).goodput``."""
        value: V | None = self.measured.get(group.name)
        return value

    def to_json(self) -> dict[str, Any]:
        """report.json's object."""
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "scenario": self.scenario,
            "platform": self.platform,
            "job": self.job.to_json() if self.job else None,
            "verdict": self.verdict.to_json() if self.verdict else dict(NO_VERDICT),
            "faults": [f.to_json() for f in self.faults],
            "goodput": self.goodput,
        }
        for g in run_groups():
            value = self.measured.get(g.name)
            out[g.key] = value.to_json() if value is not None else None
        out.update({
            "split_brain": None if self.split_brains is None else [b.to_json() for b in self.split_brains],
            "samples": self.samples.to_json() if self.samples else None,
            "observation": self.observation.to_json() if self.observation else None,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "timeline": self.timeline,
            "node_logs": dict(self.node_logs),
            "placement": _placement_json(self.placement),
            "threads": _placement_json(self.threads),
            "clock_offsets": dict(self.clock_offsets),
            "log_utc_offset_s": self.log_utc_offset_s,
            "final_state": self.final_state.to_json() if self.final_state else None,
        })
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RunResult:
        """report.json's object read back (version 1 or 2). Tolerant of older and partial files:
        a block that is absent (or not the shape this version writes) reads as not known, and
        a job spec this version cannot build reads as None (the folder keeps the original)."""
        if raw.get("schema_version") == 1:
            raw = upgrade_v1(raw)
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
            measured={g.name: g.read(raw[g.key]) for g in run_groups()
                      if g.read is not None and isinstance(raw.get(g.key), dict)},
            split_brains=(tuple(SplitBrain.from_json(b) for b in brains if isinstance(b, dict))
                          if isinstance(brains, list) else None),
            samples=Samples.from_json(samples) if isinstance(samples, dict) else None,
            observation=ScriptObservation.from_json(observation) if isinstance(observation, dict) else None,
            started_at=_float(raw.get("started_at")), finished_at=_float(raw.get("finished_at")),
            node_logs={str(k): str(v) for k, v in logs.items()} if isinstance(logs, dict) else {},
            timeline=str(raw.get("timeline") or TIMELINE),
            placement=_placement(raw.get("placement")), threads=_threads(raw.get("threads")),
            clock_offsets=_offsets(raw.get("clock_offsets")), log_utc_offset_s=_float(raw.get("log_utc_offset_s")),
            final_state=_final_state(raw.get("final_state")))


def upgrade_v1(raw: dict[str, Any]) -> dict[str, Any]:
    """A version 1 report.json as version 2: the renamed phases (RENAMED_PHASES)."""
    faults = []
    for f in raw.get("faults") or []:
        metrics = f.get("metrics") if isinstance(f, dict) else None
        if isinstance(metrics, dict):
            metrics = {**metrics, **{k: _renamed(metrics[k]) for k in ("phases", "not_applicable")
                                     if isinstance(metrics.get(k), dict)}}
            f = {**f, "metrics": metrics}
        faults.append(f)
    return {**raw, "faults": faults, "schema_version": SCHEMA_VERSION}


def _renamed(by_phase: dict[str, Any]) -> dict[str, Any]:
    return {RENAMED_PHASES.get(k, k): v for k, v in by_phase.items()}


def measure_faults(events: Sequence[Event], records: Sequence[FaultRecord], *,
                   max_restarts: int | None = None, unit: str = "step",
                   judged: Mapping[float, Recovery] | None = None) -> tuple[FaultResult, ...]:
    """Each fault with every metric group that applies to it, measured from ``events``; a fault's
    recovery window ends at the next fault that was not fired by a trigger (a cascade is part of
    the recovery it interrupted). ``judged``: recoveries a run's hypothesis already read (by
    injected_at), kept as they are so the report says what was checked."""
    starts = [(r.injected_at, r.trigger is not None) for r in records]
    out = []
    for r in records:
        mark = FaultMark(r.fault, r.target, r.injected_at, r.detail, until=analysis.window_end(r.injected_at, starts),
                         max_restarts=max_restarts, unit=unit)
        known = {"recovery": judged[r.injected_at]} if judged and r.injected_at in judged else None
        out.append(FaultResult(r, measure_fault(events, mark, known)))
    return tuple(out)


def build_result(events: Sequence[Event], records: Sequence[FaultRecord], *, scenario: str | None,
                 platform: str | None, job: JobSpec | None, verdict: Verdict | None,
                 started_at: float | None, finished_at: float | None, end: float | None = None,
                 observation: ScriptObservation | None = None,
                 node_logs: Mapping[str, str] | None = None,
                 judged: Mapping[float, Recovery] | None = None,
                 log_utc_offset_s: float | None = None, final_state: FinalState | None = None) -> RunResult:
    """The run's result, measured from its events: every fault's metric groups, the run's groups,
    goodput (up to ``end``: the run's evidence ends there), split brains, samples, GPU placement.
    ``judged``: the recoveries a hypothesis checked (ChaosRun.judged), reported as they were;
    ``final_state``: the comparison ``--compare-final`` made (ChaosRun.final_state)."""
    gp = goodput(events, end=end)
    samples = account_samples(events)
    return RunResult(
        scenario=scenario, platform=platform, job=job, verdict=verdict,
        faults=measure_faults(events, records, max_restarts=job.max_restarts if job else None,
                              unit=job.observe.unit if job else "step", judged=judged),
        goodput=None if gp is None else round(gp, 4),
        measured=measure_run(events, RunMark(checkpoint_every=job.checkpoint_every if job else None)),
        split_brains=tuple(split_brains(events)), samples=Samples.of(samples), observation=observation,
        started_at=None if started_at is None else round(started_at, 3),
        finished_at=None if finished_at is None else round(finished_at, 3),
        node_logs=dict(node_logs or {}), placement=placement_of(events), threads=threads_of(events),
        clock_offsets=clock_offsets(events), log_utc_offset_s=log_utc_offset_s, final_state=final_state)


def placement_of(events: Sequence[Event]) -> GpuPlacement | None:
    """The GPU placement the local platform recorded at start (runner/gpu_placement), if any."""
    e = last(events, RunnerEv.GPU_PLACEMENT)
    return e.data if e is not None else None


def clock_offsets(events: Sequence[Event]) -> dict[str, float]:
    """Each node whose stamped times were moved onto the runner's clock, with the offset last applied."""
    last_said = {e.node: e.data.offset_s for e in of(events, RunnerEv.CLOCK_OFFSET) if e.node}
    return {node: offset for node, offset in sorted(last_said.items()) if offset}


def _offsets(raw: Any) -> dict[str, float]:
    if not isinstance(raw, dict):
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def threads_of(events: Sequence[Event]) -> Threads | None:
    """What the local platform said about the nodes' threads at start (runner/threads), if anything."""
    e = last(events, RunnerEv.THREADS)
    return e.data if e is not None else None


def _threads(raw: Any) -> Threads | None:
    if not isinstance(raw, dict):
        return None
    try:
        return Threads.read(raw)
    except PayloadError as exc:
        log.info("report.json's threads could not be read (%s); reading it as unknown", exc)
        return None


def _placement_json(p: GpuPlacement | Threads | None) -> dict[str, Any] | None:
    if p is None:
        return None
    from elastic_chaos.events import payload_json
    return payload_json(p)


def _placement(raw: Any) -> GpuPlacement | None:
    if not isinstance(raw, dict):
        return None
    try:
        return GpuPlacement.read(raw)
    except PayloadError as exc:
        log.info("report.json's placement could not be read (%s); reading it as unknown", exc)
        return None


def _final_state(raw: Any) -> FinalState | None:
    if not isinstance(raw, dict):
        return None
    try:
        return parse_final_state(raw)
    except (ValueError, KeyError, TypeError) as exc:
        log.info("report.json's final_state could not be read (%s); reading it as unknown", exc)
        return None


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


def result_of_timeline(events: Sequence[Event]) -> RunResult:
    """What a timeline alone says about a run (no verdict: none was reached): the job it
    started, and every fault it recorded (injected, or observed by a passive watch) measured
    by the same code a run uses."""
    started = first(events, RunnerEv.JOB_STARTED)
    job = _job(started.data.spec if started else None)
    return build_result(events, [FaultRecord.from_event(e) for e in of(events, FaultEv.INJECTED, FaultEv.OBSERVED)],
                        scenario=None, platform=started.data.platform if started else None, job=job, verdict=None,
                        started_at=events[0].t if events else None, finished_at=None,
                        end=events[-1].t if events else None)


def watch_verdict(recoveries: Sequence[Recovery], saw_progress: bool, errors: Sequence[str]) -> Verdict:
    """A passive watch's verdict: each observed loss re-formed its rendezvous and (where progress
    was seen) regained progress; and every watcher stopped cleanly."""
    verdict = Verdict()
    for r in recoveries:
        ok = r.rendezvous_s is not None and (not saw_progress or r.regain_s is not None)
        how = f"rendezvous re-formed after {r.rendezvous_s:.1f}s" if r.rendezvous_s is not None \
            else "no rendezvous round completed afterwards"
        if saw_progress:
            how += f", progress regained after {r.regain_s:.1f}s" if r.regain_s is not None \
                else ", progress never regained"
        verdict.require(ok, f"{r.fault} of {node_name(r.target)}: {how}", check="recovered")
    for e in errors:
        verdict.fail(f"watcher: {e}", check="watcher")
    if not recoveries:
        verdict.require(True, "no loss observed while watching", check="recovered")
    return verdict
