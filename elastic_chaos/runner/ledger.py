"""The faults of one run: injected now, armed for a trigger, repeated, and always reverted.

The ledger is what makes a fault safe to write in a scenario: every fault it
injected is recorded (``records``), one with ``duration_s`` is reverted by a
timer, and ``revert_all()`` — called by the run's teardown, also when a test
failed — heals, thaws or restarts whatever is still broken.
"""
from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from elastic_chaos.errors import ChaosError, FaultUnavailable, RecoveryTimeout
from elastic_chaos.events import Event, FaultEv, RunnerEv, Timeline
from elastic_chaos.events.fault_events import Armed, Skipped, Triggered
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.events.runner_events import Phase
from elastic_chaos.faults.api import Fault
from elastic_chaos.faults.triggers import Trigger
from elastic_chaos.platforms.api import Platform


@dataclass
class _Applied:
    fault: Fault
    record: FaultRecord
    reverted: bool = False
    timer: threading.Timer | None = None


class ArmedFault:
    """A fault waiting for its trigger; ``wait()`` returns its record once injected."""

    def __init__(self, ledger: FaultLedger, fault: Fault, trigger: Trigger) -> None:
        self.ledger, self.fault, self.trigger = ledger, fault, trigger
        self.armed_at = time.time()
        self.record: FaultRecord | None = None
        self.error: BaseException | None = None
        self._fired = threading.Event()
        self._done = threading.Event()

    def on_event(self, event: Event) -> None:
        """Timeline listener: fire (from a thread of its own) on the first matching event."""
        if self._fired.is_set() or event.t < self.armed_at or not self.trigger.matches(event):
            return
        self._fired.set()
        self.ledger.timeline.unsubscribe(self.on_event)
        self.fault.aim_at(event)
        threading.Thread(target=self._fire, args=(event,), name=f"armed-{self.fault.name}", daemon=True).start()

    def _fire(self, event: Event) -> None:
        try:
            self.ledger.timeline.emit(FaultEv.TRIGGERED, event.node, Triggered(
                fault=self.fault.name, trigger=str(self.trigger),
                by={"source": event.type.source, "kind": event.type.name, "t": event.t}))
            self.record = self.ledger.inject(self.fault, trigger=str(self.trigger))
        except BaseException as exc:  # surfaced by wait()
            self.error = exc
        finally:
            self._done.set()

    def wait(self, timeout: float = 180.0) -> FaultRecord:
        """Block until the fault has been injected; raise if it failed or never fired."""
        if not self._done.wait(timeout):
            self.ledger.timeline.unsubscribe(self.on_event)
            raise RecoveryTimeout(f"trigger '{self.trigger}' for {self.fault.name}", timeout,
                                  self.ledger.last_progress())
        if self.error is not None:
            raise self.error
        assert self.record is not None
        return self.record


def _said(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, ChaosError) else f"{type(exc).__name__}: {exc}"


class FaultLedger:
    """Injects, arms, repeats and reverts the faults of one run on one platform."""

    def __init__(self, platform: Platform, timeline: Timeline, *, check_alive: Callable[[str], None],
                 last_progress: Callable[[], str]) -> None:
        self.platform = platform
        self.timeline = timeline
        self.check_alive = check_alive
        """Raises (JobFailed) when the job died for good: a repeated fault stops there."""
        self.last_progress = last_progress
        self.records: list[FaultRecord] = []
        """Every fault injected, in order."""
        self._applied: list[_Applied] = []
        self._lock = threading.Lock()
        self._timer_errors: list[str] = []
        """Reverts a fault's timer could not make (its thread has no one to raise to)."""

    def _available(self, fault: Fault) -> None:
        reason = fault.unavailable(self.platform)
        if reason is not None:
            raise FaultUnavailable(f"{fault.name}: {reason}")

    def inject(self, fault: Fault, *, trigger: str | None = None) -> FaultRecord:
        """Inject ``fault`` now; blocks as long as the fault takes to hit (a spot
        interruption waits out its notice). A fault with ``duration_s`` is reverted by
        a timer. ``trigger``: the armed trigger that fired it."""
        self._available(fault)
        self.timeline.emit(RunnerEv.PHASE, None, Phase(phase="inject", fault=fault.name))
        record = fault.inject(self.platform, self.timeline, trigger=trigger)
        applied = _Applied(fault, record)
        with self._lock:
            self.records.append(record)
            self._applied.append(applied)
        if fault.duration_s is not None:
            # the duration counts from when the fault hit, not from when inject returned: a link fault's
            # probe across the degraded link (up to 2 x its delay, plus a second) is part of it
            left = max(0.0, fault.duration_s - (time.time() - record.injected_at))
            applied.timer = threading.Timer(left, self._timed_revert, args=(applied,))
            applied.timer.daemon = True
            applied.timer.start()
        return record

    def arm(self, fault: Fault, trigger: Trigger) -> ArmedFault:
        """Inject ``fault`` when ``trigger`` matches a later event; returns at once."""
        self._available(fault)
        armed = ArmedFault(self, fault, trigger)
        self.timeline.emit(FaultEv.ARMED, None, Armed(fault=fault.name, trigger=str(trigger)))
        self.timeline.subscribe(armed.on_event)
        return armed

    def revert(self, record: FaultRecord) -> None:
        """Undo the fault of ``record`` now (heal, thaw, restart the store). Idempotent."""
        for applied in list(self._applied):
            if applied.record is record:
                self._revert(applied)

    def revert_all(self) -> list[str]:
        """Undo every fault not undone yet (one whose timer failed to undo it is tried again);
        returns what could not be undone, and what a timer could not undo when it was due: the
        run's teardown makes each a ``cleanup`` check (the toolkit's error, not the hypothesis')."""
        errors = list(self._timer_errors)
        for applied in list(self._applied):
            try:
                self._revert(applied)
            except Exception as exc:  # noqa: BLE001 - every fault gets its revert; each failure is said
                errors.append(f"reverting {applied.fault.name}: {_said(exc)}")
        return errors

    def _timed_revert(self, applied: _Applied) -> None:
        """A fault's ``duration_s`` ran out (on the timer's thread): revert it, and keep what failed
        for the teardown, which tries again and reports it."""
        try:
            self._revert(applied)
        except Exception as exc:  # noqa: BLE001 - nobody to raise to on a timer thread
            self._timer_errors.append(f"reverting {applied.fault.name} after its {applied.fault.duration_s:g}s: "
                                      f"{_said(exc)}")

    def _revert(self, applied: _Applied) -> None:
        with self._lock:
            if applied.reverted:
                return
            applied.reverted = True
        if applied.timer is not None:
            applied.timer.cancel()
        try:
            applied.fault.revert(self.platform, self.timeline, applied.record)
        except BaseException:
            with self._lock:
                applied.reverted = False   # not undone: the teardown tries again
            raise

    def repeat(self, make_fault: Callable[[], Fault], *, mtbf_s: float, duration_s: float,
               seed: int = 0, min_alive: int = 1) -> list[FaultRecord]:
        """Faults as a Poisson process: exponential gaps of mean ``mtbf_s`` for
        ``duration_s`` seconds. A fault is skipped (and recorded as skipped) when
        fewer than ``min_alive`` + 1 nodes are alive. Blocks for the duration."""
        rng = random.Random(seed)
        self.timeline.emit(RunnerEv.PHASE, None, Phase(
            phase="repeated", mtbf_s=mtbf_s, duration_s=duration_s, seed=seed))
        end = time.monotonic() + duration_s
        records: list[FaultRecord] = []
        while True:
            gap = rng.expovariate(1.0 / mtbf_s)
            if time.monotonic() + gap >= end:
                time.sleep(max(0.0, end - time.monotonic()))
                return records
            time.sleep(gap)
            self.check_alive("the next repeated fault")
            if len(self.platform.alive_nodes()) <= min_alive:
                self.timeline.emit(FaultEv.SKIPPED, None, Skipped(reason=f"only {min_alive} node(s) alive"))
                continue
            records.append(self.inject(make_fault()))
