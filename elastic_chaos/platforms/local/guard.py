"""What makes a local run's processes die with it, or be reaped after it.

One :class:`RunGuard` per run of the local platform, opened before etcd or any
node starts and closed after they are stopped:

- open: reap what runners that are gone left (saying so on the timeline and in
  the log), register this run (:mod:`~elastic_chaos.host.registry`), start its
  watchdog (:mod:`~elastic_chaos.host.watchdog`) and let
  :func:`elastic_chaos.signals.leftovers` check it;
- while it runs, the platform tells it what to record (etcd's PID, the cgroup
  folder, network namespaces);
- close: kill whatever of the run the platform's own stop missed (by tag, never
  by name), then verify that no process of the run is alive and etcd is gone.
  Only then is the watchdog released and the record removed; otherwise close
  raises PlatformError naming what still runs, and the watchdog and the record
  stay, so the runner's death or ``elastic-chaos reap`` still stops it.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path

from elastic_chaos import signals
from elastic_chaos.errors import PlatformError
from elastic_chaos.events import RunnerEv, Timeline
from elastic_chaos.events.runner_events import Leftovers, Reaped
from elastic_chaos.host import procs
from elastic_chaos.host.registry import Registry, RunRecord
from elastic_chaos.host.watchdog import Watchdog
from elastic_chaos.storagefs.mounts import MountRecord

log = logging.getLogger(__name__)


class RunGuard:
    def __init__(self, timeline: Timeline, work_dir: Path, run_id: str, state_dir: Path | None = None) -> None:
        self.timeline = timeline
        self.work_dir = work_dir
        self.run_id = run_id
        self.registry = Registry(state_dir)
        self.record: RunRecord | None = None
        self.watchdog: Watchdog | None = None
        self._lock = threading.Lock()  # the pool thread, a revert timer and the main thread all record

    def open(self) -> None:
        """Reap dead runs, register this one, start its watchdog. SpecError when a live run
        has this run id; SetupError when the watchdog cannot start."""
        for reaped in self.registry.reap_dead(by="this run"):
            log.warning("reaped what a killed run left: %s", reaped.describe())
            self.timeline.emit(RunnerEv.REAPED, None, Reaped.read(reaped.to_json()))
        self.record = self.registry.register(self.run_id, self.work_dir)
        signals.track(self.record.still_running)
        assert self.record.path is not None
        self.watchdog = Watchdog(self.record.path, self.work_dir / "watchdog.log").start()

    def etcd_started(self, pid: int | None) -> None:
        """Record etcd's PID and start time (at each start: the etcd-outage fault restarts it)."""
        started = procs.start_time(pid) if pid else None
        with self._lock:
            if self.record is not None and pid and started is not None:
                self.record.etcd = (pid, started)
                self.registry.save(self.record)

    def cgroups(self, path: Path) -> None:
        with self._lock:
            if self.record is not None:
                self.record.cgroups = str(path)
                self.registry.save(self.record)

    def network(self, *, netns: str | None = None, links: tuple[str, ...] = ()) -> None:
        """Record a namespace and links before they are made."""
        with self._lock:
            if self.record is not None:
                self.record.netns += [netns] if netns else []
                self.record.links += list(links)
                self.registry.save(self.record)

    def storage_mounted(self, mount: MountRecord) -> None:
        """Record a storage mount as its daemon starts, before the mount exists (a
        :class:`~elastic_chaos.storagefs.mounts.MountLedger`)."""
        with self._lock:
            if self.record is not None:
                self.record.mounts.append(mount)
                self.registry.save(self.record)

    def storage_unmounted(self, mount: MountRecord) -> None:
        """Forget a storage mount verified gone. Idempotent."""
        with self._lock:
            if self.record is not None and mount in self.record.mounts:
                self.record.mounts.remove(mount)
                self.registry.save(self.record)

    def sweep(self) -> None:
        """Kill every process of the run still alive (tagged, started after the runner): what
        the platform's own stop missed. Blocks until they are gone. Idempotent."""
        record = self.record
        if record is None:
            return
        missed = procs.kill_run(record.run_id, started_after=record.runner_start)
        if missed:
            log.warning("the platform's stop missed processes of %s; killed them: %s", record.run_id, missed)
            self.timeline.emit(RunnerEv.LEFTOVERS, None, Leftovers(killed={str(k): v for k, v in missed.items()}))

    def close(self) -> None:
        """Verify nothing of the run is alive, then release the watchdog and forget the run;
        PlatformError naming what still runs otherwise. Idempotent."""
        record = self.record
        if record is None:
            return
        left = record.still_running()
        if record.cgroups is not None and Path(record.cgroups).exists():
            left.append(f"cgroup {record.cgroups}")
        if left:
            raise PlatformError(f"left after stop: {'; '.join(left)}; the run's watchdog stops them "
                                "when this process exits, or run `elastic-chaos reap`")
        if self.watchdog is not None:
            self.watchdog.release()
        self.registry.remove(record)
        signals.untrack(record.still_running)
        self.record = None
