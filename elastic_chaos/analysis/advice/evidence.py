"""What advice reads of a run: its result and its events (a RunReport is one; so is a run in memory)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from elastic_chaos.analysis.result import FaultResult, RunResult
from elastic_chaos.events import Event


class RunEvidence(Protocol):
    """A run's typed result and the timeline it was measured from."""

    @property
    def result(self) -> RunResult: ...

    @property
    def events(self) -> Sequence[Event[Any]]: ...

    @property
    def faults(self) -> tuple[FaultResult, ...]: ...
