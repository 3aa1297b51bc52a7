"""The registry of metric groups: the built-in ones (recovery, throughput, hang, storage, link, corruption, cost,
replay) and any a user or test registers; every view iterates it (elastic_chaos.analysis.groups says what a group
is)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from elastic_chaos.analysis.corruption import CORRUPTION
from elastic_chaos.analysis.groups import FaultGroup, FaultMark, RunGroup, RunMark
from elastic_chaos.analysis.hang import HANG
from elastic_chaos.analysis.link import LINK
from elastic_chaos.analysis.recovery_analysis import RECOVERY
from elastic_chaos.analysis.replay import REPLAY
from elastic_chaos.analysis.storage import STORAGE
from elastic_chaos.analysis.throughput import THROUGHPUT
from elastic_chaos.events import Event

_FAULT: list[FaultGroup[Any]] = []
_RUN: list[RunGroup[Any]] = []
_LOADED: list[bool] = []


def register(group: FaultGroup[Any] | RunGroup[Any]) -> None:
    """Make ``group`` part of every report from now on. Idempotent; a different group under a
    name already taken is a ValueError."""
    _builtin()
    taken = next((g for g in (*_FAULT, *_RUN) if g.name == group.name or g.key == group.key), None)
    if taken is group:
        return
    if taken is not None:
        raise ValueError(f"a metric group named {group.name!r} (key {group.key!r}) is registered already")
    if isinstance(group, FaultGroup):
        _FAULT.append(group)
    else:
        _RUN.append(group)


def unregister(group: FaultGroup[Any] | RunGroup[Any]) -> None:
    """Forget ``group`` (a test's toy group). Idempotent."""
    if isinstance(group, FaultGroup):
        if group in _FAULT:
            _FAULT.remove(group)
    elif group in _RUN:
        _RUN.remove(group)


def fault_groups() -> tuple[FaultGroup[Any], ...]:
    """Every registered per-fault group, recovery first, in registration order."""
    _builtin()
    return tuple(_FAULT)


def run_groups() -> tuple[RunGroup[Any], ...]:
    """Every registered per-run group, in registration order."""
    _builtin()
    return tuple(_RUN)


def measure_fault(events: Sequence[Event], mark: FaultMark,
                  known: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Group name -> value for every group that applies to ``mark`` and measured something;
    ``known``: values already measured (by group name), taken as they are. A value is held as
    report.json holds it (written and read back): a figure rendered from memory at the end of a run
    and from report.json by ``elastic-chaos report`` rounds the same (recovery rounds its own seconds
    where it measures them, and keeps its evidence)."""
    out: dict[str, Any] = {}
    for g in fault_groups():
        if g.applies(mark.fault):
            value = (known or {}).get(g.name) or (g.derive(events, mark, out) if g.derive is not None
                                                  else g.measure(events, mark))
            if value is not None:
                out[g.name] = value if g.name == "recovery" or g.read is None else g.read(mark, value.to_json())
    return out


def measure_run(events: Sequence[Event], mark: RunMark) -> dict[str, Any]:
    """Group name -> value for every run group that measured something in ``events``."""
    out: dict[str, Any] = {}
    for g in run_groups():
        value = g.measure(events, mark)
        if value is not None:
            out[g.name] = value if g.read is None else g.read(value.to_json())
    return out


def _builtin() -> None:
    """The built-in groups, registered first, on first use."""
    if _LOADED:
        return
    _LOADED.append(True)
    from elastic_chaos.analysis.cost import COST  # derived from the recovery: measured after the others
    for g in (RECOVERY, THROUGHPUT, HANG, STORAGE, LINK, CORRUPTION, COST, REPLAY):
        register(g)
