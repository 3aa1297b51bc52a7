"""The watcher contract: a background thread that turns observations into Events.

Modelled on kopf's daemons: ``while not stop.wait(interval): poll()``. A
watcher is a context manager; leaving it stops the thread, and re-raises the
error that killed it, if any: no silent background failures. A thread that
dies says so at once on the timeline (``runner/watcher_died``), and whoever
waits on the timeline can ask ``check()`` instead of waiting blind.
"""
from __future__ import annotations

import abc
import logging
import threading
from typing import Self

from elastic_chaos.errors import ChaosError, WatcherDied
from elastic_chaos.events import RunnerEv, Timeline
from elastic_chaos.events.runner_events import WatcherDied as WatcherDiedEvent

log = logging.getLogger(__name__)


class Watcher(abc.ABC):
    interval_s: float = 0.1

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self._stop = threading.Event()
        self._ending = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @abc.abstractmethod
    def poll(self) -> None:
        """Observe once and add what changed to the timeline. Must return promptly."""

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)
        self._thread.start()

    def finish(self) -> None:  # noqa: B027 - optional hook
        """Release what the watcher holds (files, connections); runs when the thread ends."""

    def _run(self) -> None:
        try:
            self.poll()
            while not self._stop.wait(self.interval_s):
                self.poll()
            self.poll()  # a last look, so the end of a run is not lost
        except BaseException as exc:
            # the error is named on the timeline, in check()/stop() and so in the verdict;
            # the traceback is for debugging (-v), not for the console of every run
            log.error("%s died: %s: %s", type(self).__name__, type(exc).__name__, exc,
                      exc_info=log.isEnabledFor(logging.DEBUG))
            self._error = exc
            self._say_died(exc)
        finally:
            self.finish()

    def _say_died(self, exc: BaseException) -> None:
        try:
            self.timeline.emit(RunnerEv.WATCHER_DIED, None, WatcherDiedEvent(
                watcher=type(self).__name__, error=f"{type(exc).__name__}: {exc}"[:500]))
        except Exception:  # noqa: BLE001 - the timeline may be what failed; stop() still raises
            log.exception("could not record that %s died", type(self).__name__)

    @property
    def died(self) -> bool:
        """Whether the thread ended with an error (``check()`` raises it). Does not block."""
        return self._error is not None

    def check(self) -> None:
        """Raise WatcherDied if the thread has died; returns at once otherwise (also
        before start and after a clean stop)."""
        if self._error is not None:
            raise WatcherDied(type(self).__name__, self._error) from self._error

    def stopping(self) -> None:
        """Tell the thread the run is ending (it keeps polling until ``stop()``)."""
        self._ending.set()

    @property
    def ending(self) -> bool:
        return self._ending.is_set() or self._stop.is_set()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread; raise WatcherDied if an error ended it, ChaosError if it will
        not stop. Idempotent (a dead watcher raises on every call)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                raise ChaosError(f"{type(self).__name__} did not stop within {timeout_s}s")
        self.check()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
