"""Follow one fault's recovery as events arrive, without re-measuring the whole timeline per event.

A run waiting for a recovery is fed every new event. Progress can only have been regained by a
step past the highest step completed before the fault, so the full measurement
(elastic_chaos.analysis.recovery_analysis.analyze_fault) runs only for a step past that bound; when it says
"not yet" (the step came from a worker of the old generation, say), its pre-fault step raises the
bound. A wait that once re-measured the timeline for every step event now measures it a few times.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from elastic_chaos.analysis.recovery import Recovery
from elastic_chaos.analysis.recovery_analysis import analyze_fault
from elastic_chaos.events import Event, ProgressEv, of


class RecoveryTracker:
    """One fault's recovery, followed (``regained``) and measured (``measure``)."""

    def __init__(self, fault: str, target: str | None, injected_at: float, events: Callable[[], Sequence[Event]], *,
                 max_restarts: int | None = None, unit: str = "step") -> None:
        self.fault, self.target, self.injected_at = fault, target, injected_at
        self._events = events
        self._max_restarts, self._unit = max_restarts, unit
        before = of(events(), ProgressEv.STEP, until=injected_at)
        self._bound = max((e.data.step for e in before), default=-1)
        """No step at or below this can be the regain (it is at most the pre-fault step)."""

    def measure(self, until: float | None = None) -> Recovery:
        """The fault's Recovery from the events so far (``until``: the next independent fault)."""
        return analyze_fault(self._events(), fault=self.fault, target=self.target, injected_at=self.injected_at,
                             until=until, max_restarts=self._max_restarts, unit=self._unit)

    def regained(self, e: Event) -> bool:
        """Whether ``e`` (a new event) completes the recovery: a step after the fault past the bound, that the
        full measurement confirms."""
        if e.type != ProgressEv.STEP or e.t <= self.injected_at or e.data.step <= self._bound:
            return False
        rec = self.measure()
        if rec.regain_s is not None:
            return True
        if rec.pre_step is not None:
            self._bound = max(self._bound, rec.pre_step)
        return False
