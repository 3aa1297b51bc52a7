"""A hypothesis, written once: what a fault may cost, run by the CLI and by pytest, anywhere.

A hypothesis is a function of a :class:`Trial` that drives one run (start the
job, reach steady state, inject, wait for recovery) and records its checks on
the trial's :class:`~elastic_chaos.analysis.verdict.Verdict`::

    @hypothesis("kill-node", "hard node loss ...", fault=KillNode)
    def kill_node(t: Trial) -> None:
        t.start()
        t.steady()
        record = t.inject()
        rec = t.recover(record)
        t.check_recovered(rec)

``elastic-chaos run kill-node --platform kubernetes`` and the scenario
``run_hypothesis("kill-node", ...)`` in ``scenarios/`` both call
:func:`execute`, which builds the settings from one set of declared options
(the job's, :class:`TrialOptions`, the fault's fields, the hypothesis' own
``params``, the platform's), opens the run, calls the function and adds the
checks every run shares (exactly-once sample accounting, what a user's script
let us see). A job that dies for good, or does not recover in time, is a
failed verdict with the evidence, not an error.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, cast

from elastic_chaos.analysis.cost import NAMES as COST_NAMES
from elastic_chaos.analysis.cost import CostBasis
from elastic_chaos.analysis.metrics import count
from elastic_chaos.analysis.recovery import Recovery, RecoveryPath
from elastic_chaos.analysis.verdict import Verdict
from elastic_chaos.errors import FaultUnavailable, SpecError
from elastic_chaos.events import Event
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.api import Fault
from elastic_chaos.faults.catalog import fault_class
from elastic_chaos.options import DAY_S, MAX_STEPS, declared, option, split, validate
from elastic_chaos.platforms import platform_option_classes, platform_options
from elastic_chaos.runner.run import ChaosRun
from elastic_chaos.spec import (
    JOB_OPTION_CLASSES,
    PRESET_OPTION,
    REFERENCE_STEADY_STEPS,
    JobSpec,
    Preset,
    default_steady_steps,
    job_from_options,
)


@dataclass(frozen=True)
class TrialOptions:
    """What every hypothesis takes besides the job, the fault and the platform."""

    steady_steps: int | None = option(
        None, "how far training gets before the fault (steady state), in the job's unit (--unit: a script's "
              "epochs, iterations, ...). Default: the reference trainer 50 steps, between two of its checkpoints "
              "so the fault costs real progress; a script halfway between its 2nd and 3rd save by "
              "--checkpoint-every (a script gives one of the two: its pace is its own)", minimum=1,
        maximum=MAX_STEPS)
    target: str | None = option(None, "node to hit (default: the newest live node)", metavar="NODE")
    timeout_s: float = option(180.0, "seconds to wait for each phase (steady state, recovery, ...)",
                              flag="--timeout", above=0, units="s", maximum=DAY_S)

    def __post_init__(self) -> None:
        validate(self)


Steps = Callable[["Trial"], None]


@dataclass(frozen=True)
class Hypothesis:
    """One entry of the catalog."""

    name: str
    summary: str
    steps: Steps
    fault: str | None = None
    """The kind of fault it injects (elastic_chaos.faults.catalog picks the class that makes it on
    the run's platform); that class' declared fields are options of the hypothesis."""
    params: type | None = None
    """A dataclass of the hypothesis' own declared options (counts, modes)."""
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """Options it starts from (a user's value wins): e.g. a collective timeout short
    enough that a silent node is found out in seconds."""
    forced: Mapping[str, Any] = field(default_factory=dict)
    """Options it needs (a conflicting user value is refused): store-host-loss needs c10d."""

    def fault_class(self, platform: str) -> type[Fault] | None:
        """The class that makes this hypothesis' fault on ``platform``; FaultUnavailable when no
        class makes it there (a pod deletion on the local platform)."""
        if self.fault is None:
            return None
        try:
            return fault_class(self.fault, platform)
        except SpecError as exc:
            raise FaultUnavailable(f"{self.name}: {exc}") from None

    def option_classes(self, platform: str) -> tuple[type, ...]:
        """The dataclasses whose declared options this hypothesis accepts on ``platform``
        (job and platform options aside)."""
        return tuple(c for c in (TrialOptions, self.fault_class(platform), self.params) if c is not None)

    @property
    def description(self) -> str:
        return (self.steps.__doc__ or self.summary).strip()


HYPOTHESES: dict[str, Hypothesis] = {}
"""The catalog by name (the name ``elastic-chaos run`` and the scenarios use)."""


def hypothesis(name: str, summary: str, *, fault: str | None = None, params: type | None = None,
               defaults: Mapping[str, Any] | None = None,
               forced: Mapping[str, Any] | None = None) -> Callable[[Steps], Steps]:
    """Register the decorated function as the hypothesis ``name``."""
    def register(steps: Steps) -> Steps:
        if name in HYPOTHESES:
            raise ValueError(f"hypothesis {name!r} is registered twice")
        HYPOTHESES[name] = Hypothesis(name, summary, steps, fault, params, dict(defaults or {}),
                                      dict(forced or {}))
        return steps
    return register


# -- settings ----------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    """Everything one run of a hypothesis was asked for, sorted by who declares it."""

    job: JobSpec
    trial: TrialOptions
    fault_class: type[Fault] | None
    """The class that makes the hypothesis' fault on this platform."""
    fault: dict[str, Any]
    """The fault's options that were given (its defaults otherwise)."""
    params: Any
    platform: dict[str, Any]
    """The platform's options that were given (its own defaults otherwise)."""
    built: Fault | None = None
    """The fault, built once from its options and aimed at ``--target`` where it takes a node: the dry
    run shows it, the run asks it whether the platform can make it, and each trial's fault is a copy."""
    platform_name: str = "local"

    @cached_property
    def options(self) -> Any:
        """The platform's options object (its class's ``Options``) from ``platform``, made once, when the
        run asks for it (a kubeconfig is read then); SpecError for a bad one."""
        return platform_options(self.platform_name, dict(self.platform))
    cost: CostBasis = CostBasis()
    """What the job's GPUs cost in production (the report's cost of each interruption; nothing given: none)."""


def settings(h: Hypothesis | None, values: Mapping[str, Any], platform: str) -> Settings:
    """Sort ``values`` (CLI flags or fixture keywords, by option name) into the job,
    the trial, the fault, the hypothesis' params and the platform's options (``h``
    None: a job alone, for the ``start_job`` fixture). Raises SpecError for an
    unknown name, a value out of bounds, or a value that contradicts what the
    hypothesis needs."""
    job_names = {d.key for c in JOB_OPTION_CLASSES for d in declared(c)} | {PRESET_OPTION}
    own = h.option_classes(platform) if h is not None else ()
    platform_classes = platform_option_classes(platform)
    known = job_names | {n for c in (*own, *platform_classes) for n in _field_names(c)}
    basis = CostBasis(**{k: v for k, v in values.items() if k in COST_NAMES and (v or k not in known)})
    # a platform may declare one of them too (kubernetes' --gpus-per-node): the same fact, for both
    values = {k: v for k, v in values.items() if k not in COST_NAMES - known}
    known |= COST_NAMES
    # what a hypothesis starts from or needs is an option of some platforms only (network=isolated:
    # the local platform's); where this platform has no such option it has nothing to set
    forced = {k: v for k, v in (h.forced if h is not None else {}).items() if k in known}
    for key, needed in forced.items():
        if key in values and values[key] != needed:
            raise SpecError(f"{h.name if h else ''} needs {key}={needed!r} (given {values[key]!r})")
    defaults = {k: v for k, v in (h.defaults if h is not None else {}).items() if k in known}
    if PRESET_OPTION in values:  # a preset the user named sets its knobs over the hypothesis' defaults
        defaults = {k: v for k, v in defaults.items() if k not in (*Preset.JOB_KNOBS, *Preset.RDZV_KNOBS)}
    merged = {**defaults, **values, **forced}
    job_kw = {k: merged.pop(k) for k in list(merged) if k in job_names}
    made_by = h.fault_class(platform) if h is not None else None
    fault_cls = made_by or _Nothing
    params_cls = h.params if h is not None and h.params is not None else _Nothing
    trial_cls = TrialOptions if h is not None else _Nothing
    try:
        trial_kw, fault_kw, params_kw, *platform_kws = split(merged, trial_cls, fault_cls, params_cls,
                                                             *platform_classes)
    except SpecError as exc:
        raise SpecError(f"{str(exc).partition(';')[0]}; {platform} accepts: {', '.join(sorted(known))}") from None
    platform_kw = {k: v for kw in platform_kws for k, v in kw.items()}
    job = job_from_options(job_kw)
    if h is not None and job.script and trial_kw.get("steady_steps") is None and "checkpoint_every" not in job_kw:
        raise SpecError(script_pace_unknown(job))
    trial = TrialOptions(**trial_kw)
    built = build_fault(made_by, fault_kw, trial.target) if h is not None else None
    return Settings(job=job, trial=trial, fault_class=made_by, fault=fault_kw, built=built, platform_name=platform,
                    params=h.params(**params_kw) if h is not None and h.params is not None else None,
                    platform=platform_kw, cost=basis)


def script_pace_unknown(job: JobSpec) -> str:
    """Why a script job needs ``--steady-steps`` or ``--checkpoint-every`` (the reference
    trainer's 50 steps may be 50 epochs of a script)."""
    unit = job.observe.unit
    return (f"say when to inject into your script: --steady-steps N (how many {unit}s it completes before "
            f"the fault) or --checkpoint-every N (its save interval in {unit}s: the fault then comes halfway "
            f"between its 2nd and 3rd save, and a fault may cost at most N {unit}s); the reference trainer's "
            f"{REFERENCE_STEADY_STEPS} steps could be {REFERENCE_STEADY_STEPS} of your {unit}s")


@dataclass(frozen=True)
class _Nothing:
    """Declares no option (a hypothesis without a fault class or params)."""


# -- a trial ---------------------------------------------------------------------------
@dataclass
class Trial:
    """One run of a hypothesis: the run, what it was asked for, and its verdict."""

    hypothesis: Hypothesis
    run: ChaosRun
    settings: Settings
    verdict: Verdict = field(default_factory=Verdict)

    @property
    def job(self) -> JobSpec:
        return self.settings.job

    @property
    def opts(self) -> TrialOptions:
        return self.settings.trial

    @property
    def params(self) -> Any:
        return self.settings.params

    @property
    def full_world(self) -> int:
        return self.job.max_nodes * self.job.nproc_per_node

    @property
    def min_world(self) -> int:
        return self.job.min_nodes * self.job.nproc_per_node

    @property
    def replaces_nodes(self) -> bool:
        """Whether the platform's node pool replaces a node lost to a fault."""
        pool = self.run.platform.node_pool()
        return pool is not None and pool.replace_lost_nodes

    def fault(self, **overrides: Any) -> Fault:
        """A fresh copy of the hypothesis' fault (Settings.built), with ``overrides``."""
        built = self.settings.built
        if built is None:
            raise TypeError(f"hypothesis {self.hypothesis.name} declares no fault")
        made: Fault = dataclasses.replace(cast(Any, built), **overrides)   # every fault class is a dataclass
        return made

    def start(self, job: JobSpec | None = None) -> JobSpec:
        """Start the job (``job``, or the one the options describe)."""
        job = job or self.job
        self.run.start(job)
        return job

    @property
    def steady_steps(self) -> int:
        """The step the fault waits for: ``--steady-steps``, else the job's default (elastic_chaos.spec)."""
        given = self.opts.steady_steps
        return given if given is not None else default_steady_steps(self.job)

    def steady(self, *, checkpoint_bound: bool = True) -> Event:
        """Block until training reaches ``steady_steps``, then check the job is steady before the
        fault (ChaosRun.wait_until_steady): NotSteady ends the trial with no fault injected.
        ``checkpoint_bound``: the hypothesis bounds lost steps by the checkpoint interval."""
        return self.run.wait_until_steady(self.steady_steps, timeout=self.opts.timeout_s,
                                          checkpoint_bound=checkpoint_bound)

    def inject(self, fault: Fault | None = None) -> FaultRecord:
        return self.run.inject(fault or self.fault())

    def recover(self, record: FaultRecord, *, world_size: int | None = None, extra_s: float = 0.0) -> Recovery:
        """Block until progress passes the pre-fault step (at ``world_size`` if given)."""
        return self.run.wait_for_recovery(record, timeout=self.opts.timeout_s + extra_s, world_size=world_size)

    def regrow(self, record: FaultRecord) -> Recovery:
        """Block until the job trains at its full size again after ``record``."""
        return self.run.wait_for_world_size(record, self.full_world, timeout=self.opts.timeout_s)

    # -- checks every recoverable fault shares ------------------------------------
    def check_recovered(self, rec: Recovery, *, lost_at_most: int | None = None) -> None:
        """Training resumed, and lost at most ``lost_at_most`` steps (default: one
        checkpoint interval)."""
        went_on = (f"stalled {seconds(rec.regain_s)}, no restart" if rec.path is RecoveryPath.STALL
                   else "trained on through it, no restart" if rec.path is RecoveryPath.THROUGH
                   else seconds(rec.recovery_s))
        self.verdict.require(rec.recovered, f"training resumed after the fault ({went_on})", check="recovered")
        self.check_lost(rec, lost_at_most)

    def check_lost(self, rec: Recovery, lost_at_most: int | None = None) -> None:
        """The fault cost at most ``lost_at_most`` of the job's units (default: one checkpoint interval; two
        where the job saves asynchronously: a save still in flight when the fault lands is lost with it,
        and the job goes back to the one before)."""
        every = self.job.checkpoint_every
        bound = (2 * every if self.job.async_save else every) if lost_at_most is None else lost_at_most
        unit = self.job.observe.unit
        allowed = (f"at most {count(bound, unit)} allowed" if lost_at_most is not None else
                   f"at most {count(bound, unit)} allowed (two checkpoint intervals: --checkpoint-every {every} "
                   "with --async-save, a save in flight when the fault lands is lost with it)" if self.job.async_save
                   else f"at most {count(bound, unit)} allowed (one checkpoint interval: --checkpoint-every {bound})")
        unsettled = (f"; {count(rec.unsettled_steps, unit)} reported after their worker's collective had failed "
                     "are not counted (see the notes)") if rec.unsettled_steps else ""
        nothing_saved = (f"; no checkpoint was seen saved before the fault, so every {unit} since the start was lost"
                         if rec.saves_before == 0 and rec.resumed_from_step == 0 and rec.lost_steps else "")
        self.verdict.require(rec.lost_steps is not None and rec.lost_steps <= bound,
                             f"lost {count(rec.lost_steps, unit)}, {allowed}{unsettled}{nothing_saved}",
                             check="bounded-loss")


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def build_fault(cls: type[Fault] | None, values: Mapping[str, Any], target: str | None) -> Fault | None:
    """The fault ``cls`` makes from its option ``values``, aimed at ``target`` where it takes a node and
    none was given; its own checks run here (SpecError), before a report folder is opened."""
    if cls is None:
        return None
    given = dict(values)
    if "node" in _field_names(cls) and "node" not in given:
        given["node"] = target
    return cls(**given)


def seconds(v: float | None) -> str:
    return "never" if v is None else f"{v:.1f}s"
