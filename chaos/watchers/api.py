"""The watcher contract: a background thread that turns observations into Events.

Modelled on kopf's daemons: ``while not stop.wait(interval): poll()``. A
watcher is a context manager; leaving it stops the thread, and re-raises the
error that killed it, if any: no silent background failures.
"""
from __future__ import annotations

import abc
import logging
import threading

from chaos.errors import ChaosError
from chaos.events import Timeline

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
            log.exception("%s failed", type(self).__name__)
            self._error = exc
        finally:
            self.finish()

    def stopping(self) -> None:
        """Tell the thread the run is ending (it keeps polling until ``stop()``)."""
        self._ending.set()

    @property
    def ending(self) -> bool:
        return self._ending.is_set() or self._stop.is_set()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread; raise the error that ended it, or if it will not stop."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                raise ChaosError(f"{type(self).__name__} did not stop within {timeout_s}s")
        if self._error is not None:
            raise ChaosError(f"{type(self).__name__} failed: {self._error}") from self._error

    def __enter__(self) -> Watcher:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
