"""One root for every error the toolkit raises on purpose, causes chained.

Messages say what happened and what to do next; the CLI turns any ChaosError
into a one-paragraph message and exit code 2 (setup/usage) instead of a
traceback.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from elastic_chaos.storagefs import errors as fs_errors


class ChaosError(Exception):
    """Root of the toolkit's errors."""


class SetupError(ChaosError):
    """The environment cannot run what was asked (missing binary, wrong version, port in use)."""


class EtcdError(SetupError):
    """etcd is missing, unsuitable, or did not start."""


class SpecError(ChaosError):
    """A job, fault or scenario specification is invalid."""


class PlatformError(ChaosError):
    """The platform could not do what was asked of it."""


class InjectionFailed(PlatformError):
    """A fault could not be injected; nothing was (or only part was) hit."""


class FaultUnavailable(InjectionFailed):
    """This platform cannot inject that fault here (and will not substitute another);
    the message says why, e.g. partitions need root."""


class RecoveryTimeout(ChaosError):
    """The job did not reach the awaited state in time."""

    def __init__(self, what: str, waited_s: float, last_state: Any = None) -> None:
        self.what = what
        self.waited_s = waited_s
        self.last_state = last_state
        detail = f"; last state: {last_state}" if last_state is not None else ""
        super().__init__(f"timed out after {waited_s:.0f}s waiting for {what}{detail}")


class UndecodableState(ChaosError, ValueError):
    """A rendezvous value in etcd is not a well-formed rendezvous state (not base64, not
    a pickle, or fields of the wrong type); the message says which. The only exception
    ``elastic_chaos.watchers.rdzv_state.decode`` raises."""


class UnsafeUnpickle(UndecodableState):
    """A rendezvous state named a class outside the allow-list; refused, not loaded."""


class WatcherDied(ChaosError):
    """A watcher's thread ended with an error: from then on the timeline is blind to what
    it watched, so the run cannot be judged. ``watcher`` names it, ``error`` is the cause."""

    def __init__(self, watcher: str, error: BaseException) -> None:
        self.watcher, self.error = watcher, error
        super().__init__(f"{watcher} died: {type(error).__name__}: {error} (its events stop there; "
                         "the run cannot be judged on them)")


class DiskFull(ChaosError):
    """The disk a run keeps its evidence on (the report folder, the job's workdir, etcd's data) is full,
    or nearly: the run stops while it can still write its report. ``path``: where; ``free_bytes``: what
    was left there."""

    def __init__(self, path: object, free_bytes: int | None, why: str = "") -> None:
        free = "unknown" if free_bytes is None else f"{free_bytes:,}"
        super().__init__(f"no space left on device at {path}: {free} bytes free" + (f" ({why})" if why else ""))
        self.path = str(path)
        self.free_bytes = free_bytes
        self.why = why
        self.at = time.time()


@contextmanager
def storagefs_errors() -> Iterator[None]:
    """Where the toolkit drives storagefs (which raises its own classes so that it imports nothing
    of the toolkit), its errors become the toolkit's of the same meaning: a rule that cannot be is
    the user's input (SpecError, exit 2), a mount that cannot be made is setup, a daemon that
    stopped answering is the platform's."""
    try:
        yield
    except fs_errors.RuleError as exc:
        raise SpecError(str(exc)) from exc
    except fs_errors.MountError as exc:
        raise SetupError(str(exc)) from exc
    except fs_errors.DaemonError as exc:
        raise PlatformError(str(exc)) from exc
