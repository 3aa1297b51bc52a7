"""The training script's own word: elastic_chaos.trainer.progress lines (watchers/logs.py), a script's
--progress-regex (watchers/script_lines.py), worker tracebacks and NCCL's watchdog lines."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from elastic_chaos.events.payload import Payload
from elastic_chaos.events.types import Source, event_type


@dataclass(frozen=True, kw_only=True)
class Worker(Payload):
    """Who reported: elastic_chaos.trainer.progress stamps every line with the worker's identity
    (torchrun's environment and its PID)."""

    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    restart_count: int | None = None
    pid: int | None = None


@dataclass(frozen=True, kw_only=True)
class Start(Worker):
    """A worker process is up, before process-group init."""

    backend: str | None = None


@dataclass(frozen=True, kw_only=True)
class Step(Worker):
    """A rank completed ``step``."""

    step: int
    epoch: int | None = None
    epoch_size: int | None = None
    samples: tuple[tuple[int, int], ...] | None = None
    """[start, stop) ranges of the global sample ids this rank trained in the step."""
    sync_s: float | None = None
    """Seconds in forward, backward (the all-reduce: waiting for peers) and the optimizer."""
    loss: float | None = None
    via: str | None = None
    """``regex``: read from a script's own line by --progress-regex."""
    line: str | None = None
    """The script's line (regex steps)."""
    world_size_from: str | None = None
    """``agent``: the world size came from the agent's rendezvous result, not the line."""
    written_after: float | None = None
    """Regex steps: when the LogFollower last looked at the log and this line's bytes were not
    there yet: the line was written after it (and by the event's time, the log's mtime when read)."""


@dataclass(frozen=True, kw_only=True)
class Finished(Worker):
    step: int | None = None


@dataclass(frozen=True, kw_only=True)
class EmergencyExit(Worker):
    step: int | None = None
    signal: str | int | None = None


@dataclass(frozen=True, kw_only=True)
class ScriptNotice(Worker):
    """The script saw a spot/rebalance notice."""

    notice: str | None = None
    """``rebalance`` or ``interruption`` (a trainer before 0.2 wrote it as ``kind``: see ``extra``)."""
    detail: Mapping[str, Any] | None = None
    """What the metadata service said (its JSON object)."""


@dataclass(frozen=True, kw_only=True)
class WorkerError(Payload):
    """A worker's collective failed (its traceback, or its NCCL watchdog's line)."""

    error: str | None = None
    message: str | None = None
    cause: str | None = None
    """timeout / connection_closed / watchdog_stuck / other, or unknown where the line does not say."""
    root: str | None = None
    """The root cause the error names (disk_full, permission_denied, ...), if any."""
    rank: int | None = None
    via: str | None = None
    """``nccl``: the watchdog's line, stamped with its own time."""


@dataclass(frozen=True, kw_only=True)
class NcclLine(Payload):
    message: str | None = None
    rank: int | None = None
    via: str | None = None


@dataclass(frozen=True, kw_only=True)
class Unparsed(Payload):
    option: str | None = None
    step_text: str | None = None
    line: str | None = None
    why: str | None = None


class ProgressEv:
    """The training script: elastic_chaos.trainer.progress lines (watchers/logs.py), a script's
    --progress-regex (watchers/script_lines.py), worker tracebacks."""

    START = event_type(Source.PROGRESS, "start", Start)
    """A worker process is up, before process-group init (report_start): marks the restart phase."""
    STEP = event_type(Source.PROGRESS, "step", Step)
    """A rank completed a step (``step``, ``rank``, ``world_size``, ``pid``; ``samples`` for the
    exactly-once account; ``via: regex`` from a script's own line)."""
    FINISHED = event_type(Source.PROGRESS, "finished", Finished)
    """Training completed (``step``)."""
    EMERGENCY_EXIT = event_type(Source.PROGRESS, "emergency_exit", EmergencyExit)
    """A worker stopped on a signal after saving (``step``, ``signal``)."""
    NOTICE = event_type(Source.PROGRESS, "notice", ScriptNotice)
    """The script saw a spot/rebalance notice (``notice``, ``detail``)."""
    WORKER_ERROR = event_type(Source.PROGRESS, "worker_error", WorkerError)
    """A worker's collective failed: its traceback line, or its NCCL watchdog's line (``via: nccl``,
    stamped with the line's own time) (``error``, ``message``, ``cause``: timeout / connection_closed /
    watchdog_stuck / other, or unknown where the line does not say)."""
    NCCL_DUMP = event_type(Source.PROGRESS, "nccl_dump", NcclLine)
    """A worker's NCCL watchdog signalled a debug dump after a collective failed; it then waits up to
    TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC before it takes the process down (``rank``, ``message``)."""
    NCCL_TEARDOWN = event_type(Source.PROGRESS, "nccl_teardown", NcclLine)
    """A worker's NCCL watchdog takes the process down (SIGABRT follows) (``rank``, ``message``)."""
    UNPARSED = event_type(Source.PROGRESS, "unparsed", Unparsed)
    """A --progress-regex match that could not be read as a step (``why``)."""
