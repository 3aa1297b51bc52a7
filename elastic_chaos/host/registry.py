"""Live local runs, registered so that what a killed runner left is found and stopped.

A runner killed with SIGKILL (the OOM killer, a CI job cancelled hard) runs no
teardown: its etcd and its nodes lived on, formed a world of one and trained for
hours, and the next run neither reaped nor mentioned them. The kernel's death
signal (:mod:`~elastic_chaos.host.lifeline`) and the run's watchdog
(:mod:`~elastic_chaos.host.watchdog`) stop most of that at once; this
registry is the last line. Every local run keeps a small record under
``<state dir>/local-runs/`` while it runs (runner PID and start time, etcd PID
and start time, cgroup folder, network namespaces) and removes it once
everything it started is verified stopped.

Any later run, and ``elastic-chaos reap``, finds records whose runner is gone (a
reused PID is not the runner: the start time says so) and reaps them: the
processes tagged with the run (``ELASTIC_CHAOS_NODE=<run>/...`` in
/proc/PID/environ, started after the runner: never anything found by name), its
etcd's process group (verified by PID and start time), its cgroups and network
namespaces; and says what it did. A watchdog that reaped leaves a note, so the
next run says that too.

A record also keeps two live runs from sharing a run id (their tags and cgroups
would collide).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from elastic_chaos.errors import SpecError
from elastic_chaos.host import netns, procs
from elastic_chaos.host.cgroup import NodeCgroups
from elastic_chaos.storagefs import mounts as storage_mounts

log = logging.getLogger(__name__)

STATE_VAR = "ELASTIC_CHAOS_STATE"
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def default_state_dir() -> Path:
    """``$ELASTIC_CHAOS_STATE``, else ``~/.elastic-chaos`` (shared with the game days' journal)."""
    return Path(os.environ.get(STATE_VAR) or Path.home() / ".elastic-chaos")


@dataclass
class RunRecord:
    """What one live local run started, as far as reaping it needs to know."""

    run_id: str
    runner_pid: int
    runner_start: int
    """The runner's start time in clock ticks since boot (procs.start_time)."""
    report_dir: str
    started_at: float
    etcd: tuple[int, int] | None = None
    """(PID, start time) of the run's etcd, the leader of its own process group."""
    cgroups: str | None = None
    netns: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    mounts: list[storage_mounts.MountRecord] = field(default_factory=list)
    """Storage mounts (FUSE, elastic_chaos.storagefs) made by the run, recorded as their daemon starts."""
    path: Path | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("path")
        return d

    @classmethod
    def from_json(cls, raw: Any, path: Path) -> RunRecord:
        """Raises ValueError for anything but a record this module wrote."""
        if not isinstance(raw, dict):
            raise ValueError("not an object")
        etcd = raw.get("etcd")
        record = cls(run_id=_typed(raw, "run_id", str), runner_pid=_typed(raw, "runner_pid", int),
                     runner_start=_typed(raw, "runner_start", int), report_dir=_typed(raw, "report_dir", str),
                     started_at=float(_typed(raw, "started_at", (int, float))),
                     etcd=None if etcd is None else _pid_start(etcd),
                     cgroups=raw.get("cgroups") if isinstance(raw.get("cgroups"), str) else None,
                     netns=_strings(raw.get("netns")), links=_strings(raw.get("links")),
                     mounts=_mounts(raw.get("mounts")), path=path)
        if not _RUN_ID.fullmatch(record.run_id):
            raise ValueError(f"run_id {record.run_id!r}")
        return record

    def runner_alive(self) -> bool:
        return procs.is_running(self.runner_pid, self.runner_start)

    def still_running(self) -> list[str]:
        """What of this run is alive now, in words ([] when nothing): its tagged processes
        and its etcd."""
        found = procs.run_pids(self.run_id, started_after=self.runner_start)
        words = [f"{tag} (PID {pid})" for pid, tag in sorted(found.items())]
        if self.etcd and self.etcd[0] not in found and procs.is_running(*self.etcd):
            words.append(f"etcd of {self.run_id} (PID {self.etcd[0]})")
        words += [f"storage mount {m.mountpoint} (daemon PID {m.daemon_pid})" for m in self.mounts
                  if storage_mounts.find(m.mountpoint, m.source) or procs.is_running(m.daemon_pid, m.daemon_start)]
        return words


def _typed(raw: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = raw.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"{key}: {value!r}")
    return value


def _pid_start(value: Any) -> tuple[int, int]:
    if not (isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value)):
        raise ValueError(f"etcd: {value!r}")
    return value[0], value[1]


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _mounts(value: Any) -> list[storage_mounts.MountRecord]:
    found = []
    for raw in value if isinstance(value, list) else []:
        try:
            found.append(storage_mounts.MountRecord.from_json(raw))
        except (ValueError, TypeError) as exc:
            log.warning("ignoring a malformed storage mount in a run record: %s", exc)
    return found


@dataclass
class Reaped:
    """What reaping one run did."""

    run_id: str
    runner_pid: int
    report_dir: str
    by: str
    """Who reaped: ``its watchdog`` (at the runner's death) or ``this run``/``elastic-chaos reap``."""
    killed: dict[int, str] = field(default_factory=dict)
    """PID -> what it was (``node-0``, ``etcd``)."""
    removed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    at: float = field(default_factory=time.time)

    def describe(self) -> str:
        groups: dict[str, list[int]] = {}
        for pid, what in sorted(self.killed.items()):
            groups.setdefault(what, []).append(pid)
        killed = ", ".join(f"{what} (PID{'s' if len(pids) > 1 else ''} {', '.join(map(str, pids))})"
                           for what, pids in groups.items())
        did = "; ".join(filter(None, [f"killed {killed}" if killed else "",
                                      f"removed {', '.join(self.removed)}" if self.removed else ""]))
        text = (f"run {self.run_id} (report {self.report_dir}): its runner, PID {self.runner_pid}, is gone; "
                f"{self.by} {did or 'found nothing of it still running'}")
        if self.errors:
            text += "; NOT reaped: " + "; ".join(self.errors)
        return text

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["killed"] = {str(k): v for k, v in self.killed.items()}
        return d

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Reaped:
        return cls(run_id=str(raw["run_id"]), runner_pid=int(raw["runner_pid"]), report_dir=str(raw["report_dir"]),
                   by=str(raw["by"]), killed={int(k): str(v) for k, v in dict(raw.get("killed") or {}).items()},
                   removed=[str(r) for r in raw.get("removed") or []], errors=[str(e) for e in raw.get("errors") or []],
                   at=float(raw.get("at") or 0.0))


class Registry:
    """The records under ``<state dir>/local-runs``. Safe to use from several processes:
    files are written by rename, and a record is claimed (renamed) before it is reaped."""

    def __init__(self, state_dir: Path | None = None) -> None:
        self.dir = (state_dir or default_state_dir()) / "local-runs"

    # -- this run -------------------------------------------------------------
    def register(self, run_id: str, report_dir: Path) -> RunRecord:
        """Record a run this process is starting. SpecError when the run id is not a plain
        name, or a live run has it; a dead run's record with that id is reaped first."""
        if not _RUN_ID.fullmatch(run_id):
            raise SpecError(f"run id {run_id!r}: use letters, digits, '.', '_' and '-' (it names processes' "
                            "tags, cgroups and files)")
        me = os.getpid()
        start = procs.start_time(me)
        assert start is not None
        path = self.dir / f"{run_id}.json"
        record = RunRecord(run_id=run_id, runner_pid=me, runner_start=start, report_dir=str(report_dir),
                           started_at=time.time(), path=path)
        self.dir.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            except FileExistsError:
                self._make_room(run_id, path)
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(record.to_json(), f)
            return record
        raise SpecError(f"could not register run {run_id} in {self.dir}: its record keeps coming back")

    def _make_room(self, run_id: str, path: Path) -> None:
        other = self.load(path)
        if other is not None and other.runner_alive():
            raise SpecError(f"run id {run_id} is in use by a live run (runner PID {other.runner_pid}, report "
                            f"{other.report_dir}); give another --run-id")
        if other is None:
            path.unlink(missing_ok=True)  # unreadable: nothing can be reaped from it
        else:
            self.reap(other, by="this run")

    def save(self, record: RunRecord) -> None:
        """Write ``record`` again (etcd restarted, a node's cgroup or namespace added)."""
        assert record.path is not None
        tmp = record.path.with_name(f".{record.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(record.to_json()))
        os.replace(tmp, record.path)

    def remove(self, record: RunRecord) -> None:
        """Forget ``record``: everything it names was verified stopped. Idempotent."""
        if record.path is not None:
            record.path.unlink(missing_ok=True)

    # -- others ---------------------------------------------------------------
    def load(self, path: Path) -> RunRecord | None:
        """The record at ``path``; None when it is gone or unreadable (logged)."""
        try:
            return RunRecord.from_json(json.loads(path.read_text()), path)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable run record %s: %s", path, exc)
            return None

    def records(self) -> list[RunRecord]:
        """Every readable record, the live runs' included."""
        if not self.dir.is_dir():
            return []
        self._recover_abandoned_claims()
        found = (self.load(p) for p in sorted(self.dir.glob("*.json")) if not p.name.endswith(".reaped.json"))
        return [r for r in found if r is not None]

    def _recover_abandoned_claims(self) -> None:
        """A reaper that died while reaping left its claim: give the record back."""
        for claim in self.dir.glob("*.json.reaping-*"):
            reaper = claim.name.rpartition("-")[2]
            if reaper.isdigit() and not procs.is_running(int(reaper)):
                with contextlib.suppress(OSError):
                    os.rename(claim, claim.with_name(claim.name.partition(".reaping-")[0]))

    def dead(self) -> list[RunRecord]:
        """Records whose runner is gone."""
        return [r for r in self.records() if not r.runner_alive()]

    def reap_dead(self, *, by: str) -> list[Reaped]:
        """Reap every run whose runner is gone, and collect what watchdogs reaped since the
        last call (their notes are consumed). Blocks until the reaped processes are gone."""
        done = self._notes()
        for record in self.dead():
            reaped = self.reap(record, by=by)
            if reaped is not None:
                done.append(reaped)
        return done

    def reap(self, record: RunRecord, *, by: str) -> Reaped | None:
        """Stop everything ``record`` names and forget it; None when another reaper has
        claimed it. A record that could not be fully reaped is kept for the next try."""
        assert record.path is not None
        claimed = record.path.with_name(f"{record.path.name}.reaping-{os.getpid()}")
        try:
            os.rename(record.path, claimed)
        except FileNotFoundError:
            return None
        reaped = reap_record(record, by=by)
        if reaped.errors:
            os.replace(claimed, record.path)
        else:
            claimed.unlink(missing_ok=True)
        return reaped

    def leave_note(self, reaped: Reaped) -> None:
        """For a watchdog: what it reaped, for the next run or ``elastic-chaos reap`` to say."""
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"{reaped.run_id}.{int(reaped.at * 1000)}.reaped.json"
        path.write_text(json.dumps(reaped.to_json()))

    def _notes(self) -> list[Reaped]:
        notes: list[Reaped] = []
        for path in sorted(self.dir.glob("*.reaped.json")) if self.dir.is_dir() else []:
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                notes.append(Reaped.from_json(json.loads(path.read_text())))
            path.unlink(missing_ok=True)
        return notes


def reap_record(record: RunRecord, *, by: str) -> Reaped:
    """Take down its storage mounts, kill what ``record`` names (its runner being gone) and
    remove its cgroups and network namespaces; blocks until the killed processes are gone.
    Idempotent."""
    reaped = Reaped(record.run_id, record.runner_pid, record.report_dir, by=by)
    for mount in record.mounts:  # first: a process blocked in a held op is freed when its daemon goes
        try:
            reaped.removed += [f"storage mount {mount.mountpoint}: {what}"
                               for what in storage_mounts.cleanup(mount, timeout_s=2.0)]
        except OSError as exc:
            reaped.errors.append(f"storage mount {mount.mountpoint}: {exc}")
    try:
        for pid, tag in procs.kill_run(record.run_id, started_after=record.runner_start).items():
            reaped.killed[pid] = tag.partition("/")[2] or tag
    except (OSError, TimeoutError) as exc:
        reaped.errors.append(f"tagged processes: {exc}")
    if record.etcd is not None:
        _kill_group(record.etcd, reaped)
    if record.cgroups is not None:
        _remove_cgroups(record, reaped)
    if record.netns or record.links:
        removed, errors = netns.remove_leftovers(record.netns, record.links)
        reaped.removed += removed
        reaped.errors += errors
    return reaped


def _kill_group(etcd: tuple[int, int], reaped: Reaped, timeout_s: float = 10.0) -> None:
    """SIGKILL etcd's process group, the leader verified by PID and start time first."""
    pid, start = etcd
    if not procs.is_running(pid, start) or procs.group_of(pid) != pid:
        return
    members = procs.group_members(pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    except OSError as exc:
        reaped.errors.append(f"etcd's process group {pid}: {exc.strerror}")
        return
    reaped.killed.update({m: "etcd" for m in members})
    deadline = time.monotonic() + timeout_s
    while any(procs.is_running(m) for m in members):
        if time.monotonic() > deadline:
            reaped.errors.append(f"etcd's process group {pid} survived SIGKILL")
            return
        time.sleep(0.02)


def _remove_cgroups(record: RunRecord, reaped: Reaped) -> None:
    assert record.cgroups is not None
    groups = NodeCgroups.of_run(record.cgroups, record.run_id)
    if groups is None:
        return  # gone, or not a path this platform makes: never touched
    try:
        for pid in groups.kill_all():
            reaped.killed.setdefault(pid, "in the run's cgroup")
        groups.remove()
    except (OSError, TimeoutError) as exc:
        reaped.errors.append(f"cgroups {groups.dir}: {exc}")
        return
    if groups.dir.exists():
        reaped.errors.append(f"could not remove cgroup {groups.dir}")
    else:
        reaped.removed.append(f"cgroup {groups.dir}")
