"""The job's checkpoint volume behind the storage layer, for a whole run: mounted before the
nodes start, driven by the storage faults, taken down after the nodes stopped.

A platform whose job asks for it (``JobSpec.storage_layer``) mounts a
:class:`~elastic_chaos.storagefs.StorageFs` over the folder its nodes save
checkpoints in (the local platform's ``checkpoints/``; the local cluster's shared
folder of the run, which every pod's host-path volume binds) *before* the first node
starts, and keeps it until the nodes are gone: a node in a network namespace or a pod
copies the mount table when it starts, so a mount made later would not reach it.
Faults switch rules on the mount, never the mount itself. A job that does not ask
for it gets no mount.

:class:`LayerStorage` is the :class:`~elastic_chaos.platforms.capabilities.CheckpointStorage`
every platform with such a layer offers (it asks of its platform only the layer).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Protocol

from elastic_chaos.errors import InjectionFailed, PlatformError, storagefs_errors
from elastic_chaos.platforms import capabilities as caps
from elastic_chaos.platforms.api import Platform
from elastic_chaos.platforms.nodes import Hit, now
from elastic_chaos.spec import JobSpec
from elastic_chaos.storagefs import MountLedger, OpRecord, Paused, Rule, StorageFs, unavailable
from elastic_chaos.storagefs.errors import PauseTimeout
from elastic_chaos.waiting import WaitTimeout, eventually

log = logging.getLogger(__name__)

ASK = "start the job with --storage-layer (JobSpec.storage_layer), as the storage hypotheses do"


class StorageLayer:
    """One storage mount over a job's checkpoint folder, for one run. ``unmount`` is idempotent."""

    def __init__(self, folder: Path, workdir: Path, *, ledger: MountLedger | None = None) -> None:
        self.folder = folder
        self.fs = StorageFs(folder, workdir=workdir, ledger=ledger)

    @classmethod
    def for_job(cls, job: JobSpec, folder: Path, workdir: Path, *,
                ledger: MountLedger | None = None) -> StorageLayer | None:
        """The layer mounted over ``folder`` when ``job`` asks for one (None when it does not);
        blocks until the mount is live. SetupError saying why when it cannot be made."""
        if not job.storage_layer:
            return None
        folder.mkdir(parents=True, exist_ok=True)
        layer = cls(folder, workdir, ledger=ledger)
        with storagefs_errors():
            layer.fs.mount()
        log.info("checkpoint folder %s is behind the storage layer (op log %s)", folder, layer.fs.ops_path)
        return layer

    def unmount(self, *, settle_within_s: float = 0.0) -> None:
        """Clear every rule (held ops go on), unmount and stop the daemon. Idempotent. With
        ``settle_within_s``, first wait (that long at most) until every process the op log saw
        using the mount is gone: a pod's processes outlive its API object for a moment, and a
        file they open after the daemon went would fail with ENOTCONN."""
        if settle_within_s > 0:
            self._settle(settle_within_s)
        with storagefs_errors():
            self.fs.unmount()

    def _settle(self, within_s: float) -> None:
        users = {r.pid for r in self.fs.ops() if r.pid and r.tid}   # callers (the daemon's own lines have no tid)
        if not eventually(lambda: not any(_alive(p) for p in users), timeout_s=within_s, interval_s=0.2):
            log.warning("processes that used %s were still alive after %.0fs (%s); unmounting anyway", self.folder,
                        within_s, ", ".join(str(p) for p in sorted(users) if _alive(p)))


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (read from /proc; no signal sent)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


class StorageHost(caps.Host, Protocol):
    """What :class:`LayerStorage` asks of its platform."""

    storage_layer: StorageLayer | None


class LayerStorage(caps.CheckpointStorage):
    """The checkpoint volume's faults, made on the platform's storage layer."""

    platform: StorageHost

    def unavailable(self) -> str | None:
        reason = unavailable()
        if reason is not None:
            return f"the storage layer needs a FUSE mount, which cannot be made here: {reason}"
        if self.platform.job is not None and self.layer is None:
            return f"the job's checkpoint folder is not behind the storage layer: {ASK}"
        return None

    @property
    def layer(self) -> StorageLayer | None:
        return self.platform.storage_layer

    def _fs(self) -> StorageFs:
        if self.layer is None:
            raise InjectionFailed(f"the job's checkpoint folder is not behind the storage layer: {ASK}")
        return self.layer.fs

    def _apply(self, rule: Rule, *, node: str | None) -> Hit:
        at = now()
        with storagefs_errors():
            name = self._fs().set_rule(rule, node=node)
        return Hit(node=node or "all", at=at, action="rule-set", detail={"rule": name})

    def _restore(self, rule: str) -> Hit:
        at = now()
        if self.layer is None:
            return Hit(node="all", at=at, action="not-mounted")
        with storagefs_errors():
            cleared = self.layer.fs.clear_rule(rule)
        return Hit(node="all", at=at, action="cleared" if cleared else "already-over", detail={"rule": rule})

    def _wait_pause(self, timeout_s: float) -> Paused:
        with storagefs_errors():   # WaitTimeout is the toolkit's own: it passes through untranslated
            try:
                return self._fs().wait_pause(timeout_s)
            except PauseTimeout as exc:
                raise WaitTimeout(f"a crash point of {self._fs().mountpoint} to pause an op", timeout_s, None) from exc

    def _release(self, pause: int | None) -> list[Paused]:
        with storagefs_errors():
            return self._fs().release(pause)

    def ops(self) -> list[OpRecord]:
        with storagefs_errors():
            return self._fs().ops()

    def direct(self) -> Path:
        return self._fs().direct

    def mountpoint(self) -> Path:
        return self._fs().mountpoint

    def op_log(self) -> Path:
        return self._fs().ops_path

    def view(self, path: Path) -> Path:
        return direct_path(self.layer, path)


def storage_of(platform: Platform) -> caps.CheckpointStorage | None:
    """``platform``'s checkpoint storage when its job's folder is behind the storage layer (None:
    it has no such layer, or the job did not ask for one)."""
    if platform.lacks(caps.CheckpointStorage) is not None:
        return None
    storage = platform.capability(caps.CheckpointStorage)
    try:
        storage.mountpoint()
    except InjectionFailed:
        return None
    return storage


def direct_path(layer: StorageLayer | None, path: Path) -> Path:
    """``path`` as this process should read it now: through the layer's direct view of the
    folder while it is mounted and ``path`` lies inside (a look through the mount would wait
    out a held op), else as is. Touches no file (a path inside the mount is never resolved)."""
    if layer is None:
        return path
    try:
        inside = Path(os.path.abspath(path)).relative_to(layer.fs.mountpoint)
        return layer.fs.direct / inside
    except (ValueError, PlatformError):   # outside the mount, or not mounted (any more)
        return path
