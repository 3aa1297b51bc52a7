"""The final-state oracle: is the job that recovered the job that would have existed without the fault?

A lost-steps bound cannot see the resume bugs that cost real teams weeks: an LR
scheduler or optimizer state not saved, an RNG not restored, a sampler's epoch
not set, a loader that restarts its epoch. Two runs of the same job and seed to
the same final step, one with the fault and one without, must end with equal
checkpoints. ``elastic_chaos.trainer.compare_state`` compares them tensor by
tensor under the nodes' python (torch stays out of this process;
``elastic_chaos.host.comparer`` runs it) and prints JSON; :func:`parse` reads that
into one :class:`FinalState`, whose :meth:`~FinalState.describe` is the sentence
every view prints ("final state: equal", or what diverged first and why).
"""
from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_chaos.analysis.schedule import Reference, ReferenceKind
from elastic_chaos.errors import ChaosError, SpecError
from elastic_chaos.host.comparer import DEFAULT_TIMEOUT_S, ComparerRun, run_comparer

CHECK = "final-state"
"""The verdict's check that carries the comparison (report.json, summary.md, report.html, the CLI)."""
FOLDER = "final-state"
"""Where a run's folder keeps the clean reference run and the whole comparison (comparison.json)."""


class StateClass(enum.Enum):
    """What part of a training job's state a checkpoint path holds (the comparer names it by its keys)."""

    DATA_POSITION = "data_position"
    LR_SCHEDULER = "lr_scheduler"
    RNG = "rng"
    GRAD_SCALER = "grad_scaler"
    OPTIMIZER = "optimizer"
    MODEL = "model"
    OTHER = "other"

    @property
    def title(self) -> str:
        return _TITLES[self]


_TITLES = {StateClass.DATA_POSITION: "data position", StateClass.LR_SCHEDULER: "LR scheduler",
           StateClass.RNG: "RNG state", StateClass.GRAD_SCALER: "gradient scaler",
           StateClass.OPTIMIZER: "optimizer state", StateClass.MODEL: "model", StateClass.OTHER: "other state"}


class ComparerFailed(ChaosError):
    """The comparer could not say (it crashed, timed out, or printed what is not its JSON): the toolkit's failure."""


@dataclass(frozen=True)
class Divergence:
    """One value that differs: where (``path``, its ``state``), how (``detail``), by how much, and the likely cause."""

    path: str
    state: StateClass
    detail: str
    max_abs_diff: float | None
    cause: str

    def describe(self) -> str:
        diff = f"; max abs diff {self.max_abs_diff:.3g}" if self.max_abs_diff is not None else ""
        return f"{self.state.title} diverged at {self.path} ({self.detail}{diff})"


@dataclass(frozen=True)
class FinalState:
    """The comparison of a reference run's final checkpoint (``a``) with the judged run's (``b``)."""

    equal: bool
    a: str
    b: str
    tolerance: float
    compared: int
    """Values compared (tensors and plain values)."""
    differing: int
    step_a: int | None
    step_b: int | None
    classes: dict[StateClass, int]
    """Differing values per state class."""
    first: Divergence | None
    """The divergence that most likely explains the others (data position, LR, RNG before weights)."""
    divergences: tuple[Divergence, ...]
    reference: Reference | None = None
    """The clean run ``a`` came from (a run at one world size, or a replay of the judged run's schedule);
    None: the caller gave two checkpoints (``elastic-chaos compare-final``)."""
    max_abs_diff: float | None = None
    """The largest absolute difference over every differing floating value (None: none differs so)."""
    not_numeric: int = 0
    """Differing values that are not floating values compared by size (an integer step, a shape, a type):
    no tolerance covers them."""
    clean_spread: float | None = None
    """Where the reference is a replay of the job's schedule: the largest difference between two clean
    replays of it (0.0: bitwise equal), which ``tolerance`` covers; None: not measured."""
    diverged_by: int | None = None
    """The earliest step whose saves of the two runs differ (:func:`trace_back`); None: not traced."""
    equal_at: int | None = None
    """The latest earlier step whose saves were equal; None: none was (or not traced)."""

    @property
    def comparison(self) -> str:
        measured = "" if self.clean_spread is None else (
            ": two clean replays of the schedule were bitwise equal" if self.clean_spread == 0 else
            f": two clean replays of the schedule differed by up to {self.clean_spread:g}")
        return ("bitwise" if self.tolerance == 0 else f"within {self.tolerance:g}") + measured

    def with_clean_spread(self, spread: float) -> FinalState:
        """The same comparison, saying the spread of two clean replays its tolerance was set from."""
        return dataclasses.replace(self, clean_spread=spread)

    @property
    def step(self) -> str:
        if self.step_a is None and self.step_b is None and self.reference is not None \
                and self.reference.kind is ReferenceKind.CLEAN_TWIN:
            return "the end of both runs"   # a script's saves name no step; each run trained to its own end
        if self.step_a == self.step_b:
            return f"step {self.step_a}" if self.step_a is not None else "a step the checkpoints do not name"
        return f"steps {self.step_a} (A) and {self.step_b} (B)"

    def describe(self) -> str:
        """The one sentence every view prints."""
        note = f"; {self.reference.describe()}" if self.reference else ""
        if self.equal:
            return f"final state: equal ({self.comparison}, {self.compared} values at {self.step}{note})"
        assert self.first is not None
        others = ", ".join(f"{c.title} {n}" for c, n in self.classes.items())
        return (f"final state: diverged: {self.first.describe()} at {self.step}{self.since}; likely cause: "
                f"{self.first.cause} [{self.differing} of {self.compared} values differ ({self.comparison}): "
                f"{others}{note}]")

    @property
    def since(self) -> str:
        """From which step the runs differ, as far as their saves tell."""
        if self.diverged_by is None:
            return ""
        if self.equal_at is None:
            return f"; already different at step {self.diverged_by}, the earliest save both runs kept"
        return f"; equal at step {self.equal_at}, different from the save of step {self.diverged_by} on"

    def with_reference(self, reference: Reference) -> FinalState:
        return dataclasses.replace(self, reference=reference)

    def with_cause(self, cause: str) -> FinalState:
        """The same comparison, its first divergence's likely cause replaced by one the caller knows (the
        fault put it there: a corrupted save), instead of the resume bug the state class suggests."""
        if self.first is None:
            return self
        first = dataclasses.replace(self.first, cause=cause)
        return dataclasses.replace(self, first=first,
                                   divergences=tuple(first if d is self.first else d for d in self.divergences))

    def to_json(self) -> dict[str, Any]:
        """comparison.json's object and report.json's ``final_state`` (read back by :func:`parse`)."""
        return {"equal": self.equal, "a": self.a, "b": self.b, "tolerance": self.tolerance,
                "comparison": self.comparison, "compared": self.compared, "differing": self.differing,
                "step": {"a": self.step_a, "b": self.step_b}, "classes": {c.value: n for c, n in self.classes.items()},
                "first": _divergence_json(self.first) if self.first else None,
                "divergences": [_divergence_json(d) for d in self.divergences],
                "reference": self.reference.to_json() if self.reference else None,
                "max_abs_diff": self.max_abs_diff, "not_numeric": self.not_numeric, "clean_spread": self.clean_spread,
                "diverged_by": self.diverged_by, "equal_at": self.equal_at, "summary": self.describe()}


def _divergence_json(d: Divergence) -> dict[str, Any]:
    return {"path": d.path, "state": d.state.value, "detail": d.detail, "max_abs_diff": d.max_abs_diff,
            "cause": d.cause}


def parse(data: Any) -> FinalState:
    """A :class:`FinalState` from the comparer's JSON object, or from :meth:`FinalState.to_json`'s (report.json's
    ``final_state``: with its reference and trace); ValueError naming what is malformed."""
    if not isinstance(data, dict) or not isinstance(data.get("equal"), bool):
        raise ValueError("not the comparer's output (no boolean 'equal')")
    step = data.get("step") or {}
    found = tuple(_divergence(d) for d in _list(data, "divergences"))
    first = _divergence(data["first"]) if data.get("first") is not None else None
    if data["equal"] == (first is not None):
        raise ValueError("'equal' contradicts 'first'")
    tolerance = float(data.get("tolerance", 0.0))
    if not math.isfinite(tolerance) or tolerance < 0:
        raise ValueError(f"tolerance {tolerance}")
    return FinalState(equal=data["equal"], a=str(data.get("a", "")), b=str(data.get("b", "")), tolerance=tolerance,
                      compared=_int(data, "compared"), differing=_int(data, "differing"),
                      step_a=_opt_int(step.get("a")), step_b=_opt_int(step.get("b")),
                      classes={StateClass(k): int(v) for k, v in dict(data.get("classes") or {}).items()},
                      first=first, divergences=found,
                      reference=Reference.from_json(data["reference"]) if data.get("reference") is not None else None,
                      max_abs_diff=_opt_float(data.get("max_abs_diff")), not_numeric=_int(data, "not_numeric"),
                      clean_spread=_opt_float(data.get("clean_spread")),
                      diverged_by=_opt_int(data.get("diverged_by")), equal_at=_opt_int(data.get("equal_at")))


def _divergence(d: Any) -> Divergence:
    if not isinstance(d, dict):
        raise ValueError(f"a divergence is an object, not {type(d).__name__}")
    diff = d.get("max_abs_diff")
    return Divergence(path=str(d["path"]), state=StateClass(d["state"]), detail=str(d.get("detail", "")),
                      max_abs_diff=float(diff) if diff is not None else None, cause=str(d.get("cause", "")))


def _list(data: dict[str, Any], key: str) -> list[Any]:
    v = data.get(key) or []
    if not isinstance(v, list):
        raise ValueError(f"{key!r} is not a list")
    return v


def _int(data: dict[str, Any], key: str) -> int:
    v = data.get(key, 0)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ValueError(f"{key!r} is not a count: {v!r}")
    return v


def _opt_float(v: Any) -> float | None:
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _opt_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def read(done: ComparerRun) -> FinalState:
    """What a comparer run said: its FinalState (exit 0 or 1); SpecError for bad input (exit 2, its
    message); ComparerFailed for anything else (a timeout, a crash, output that is not its JSON)."""
    if done.returncode is None:
        raise ComparerFailed(f"the checkpoint comparer did not finish in time: {' '.join(done.command)}")
    line = next((ln for ln in reversed(done.stdout.splitlines()) if ln.startswith("{")), None)
    try:
        data = json.loads(line) if line is not None else None
    except json.JSONDecodeError:
        data = None
    if done.returncode == 2 and isinstance(data, dict) and "error" in data:
        raise SpecError(f"cannot compare the checkpoints: {data['error']}")
    if done.returncode == 2 and data is None:   # argparse's usage error, or no torch for that python
        raise SpecError(f"cannot compare the checkpoints: {_last_line(done.stderr)}")
    missing = re.search(r"No module named '?([\w.]+)", done.stderr)
    if data is None and missing:
        raise SpecError(f"cannot compare the checkpoints: {done.command[0]} cannot import {missing[1]}; give "
                        "the python your nodes run, one with torch and elastic-chaos (--python)")
    if done.returncode not in (0, 1) or data is None:
        raise ComparerFailed(f"the checkpoint comparer failed (exit {done.returncode}): {_last_line(done.stderr)}")
    try:
        state = parse(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise ComparerFailed(f"the checkpoint comparer's output is malformed: {exc}") from None
    if state.equal != (done.returncode == 0):
        raise ComparerFailed(f"the checkpoint comparer exited {done.returncode} but said equal={state.equal}")
    return state


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:400] if lines else "(no output)"


def compare_final(a: Path, b: Path, *, tolerance: float = 0.0, python: str | None = None, trust: bool = False,
                  timeout_s: float = DEFAULT_TIMEOUT_S) -> FinalState:
    """Compare reference checkpoint ``a`` with judged checkpoint ``b`` (files, DCP folders, or folders of
    the reference trainer's saves); blocks at most ``timeout_s``. SpecError for a missing path, a file
    that is not a checkpoint, or a ``python`` that cannot run the comparer; ComparerFailed otherwise."""
    for path in (a, b):
        if not path.exists():
            raise SpecError(f"cannot compare the checkpoints: {path} does not exist")
    try:
        done = run_comparer(a, b, tolerance=tolerance, python=python, trust=trust, timeout_s=timeout_s)
    except OSError as exc:
        raise SpecError(f"cannot run the checkpoint comparer with {python!r}: {exc.strerror or exc}; give a "
                        "python that has torch (--python)") from None
    return read(done)


_SAVE = re.compile(r"^ckpt-(\d+)\.pt$")


def saved_steps(folder: Path) -> dict[int, Path]:
    """The reference trainer's saves in ``folder`` by step (empty for a file or another layout)."""
    if not folder.is_dir():
        return {}
    return {int(m[1]): p for p in folder.iterdir() if (m := _SAVE.match(p.name))}


def trace_back(state: FinalState, a: Path, b: Path, *, tolerance: float = 0.0, python: str | None = None,
               trust: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S) -> FinalState:
    """``state`` (a divergence at the final step of folders ``a`` and ``b``) with the earliest step whose saves
    differ, from the saves both folders still hold, oldest first; ``state`` as it is when equal or when the
    folders share no earlier save. Blocks for one comparison per save compared."""
    if state.equal:
        return state
    ours, theirs = saved_steps(a), saved_steps(b)
    final = state.step_b if state.step_b is not None else max(theirs, default=0)
    common = sorted(s for s in set(ours) & set(theirs) if s < final)
    equal_at = None
    for step in common:
        if not compare_final(ours[step], theirs[step], tolerance=tolerance, python=python, trust=trust,
                             timeout_s=timeout_s).equal:
            return dataclasses.replace(state, diverged_by=step, equal_at=equal_at)
        equal_at = step
    if not common:
        return state
    return dataclasses.replace(state, diverged_by=final, equal_at=equal_at)
