"""A report folder holds exactly one run; it is checked before anything starts.

A second run into a used folder once passed on the first run's evidence: the
node logs, opened for append and followed from their start, replayed the old
progress (the fault was injected during the first rendezvous), the timeline
held events from minutes before the run began, and the trainer resumed from
the old run's checkpoints. So a folder that holds a run (``report.json``,
``timeline.jsonl``, ``nodes/`` or ``checkpoints/``) is refused, unless the
caller asks to overwrite it, which deletes the old run first.

Overwriting deletes only what a run writes (:data:`RUN_OUTPUTS`): a folder that
also holds anything else, or that holds ``nodes/`` or ``checkpoints/`` without
the timeline or report an elastic-chaos run leaves, is refused rather than
emptied (it may be someone's training directory).

A report folder is new, empty, or one a run wrote; anything else is refused
before anything starts, with ``--overwrite`` too: ``/``, the home folder and its
parents (a run once wrote report.json, nodes/ and etcd-data/ into ``/`` and
``$HOME``), and any folder holding files no run writes (a run's files mixed in
with a user's cannot be told apart, and overwriting deletes only ours).

A folder that is a file, lies under a file or cannot be written is refused too,
with what to do instead, never with a traceback from the middle of a run.

A live run owns its folder: :func:`claim` takes a lock (``flock`` on :data:`LOCK` in the folder,
held until the run has written its report; the kernel drops it when the runner dies, so a killed
run leaves no stale lock) before anything in the folder is deleted or written. ``--overwrite``, the
pytest plugin and :func:`check` refuse a folder whose lock is held, naming the run that holds it
(its PID, command and start), and so does a live local run registered with that folder: a second
run once deleted a live run's files and both failed on mixed evidence.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from elastic_chaos.analysis.final_state import FOLDER as FINAL_STATE_FOLDER
from elastic_chaos.errors import SpecError
from elastic_chaos.faults.corrupt import FOLDER as CORRUPTED_ORIGINALS
from elastic_chaos.faults.shard import FOLDER as SHARD_ORIGINALS
from elastic_chaos.reporting.views.prometheus import FILE as METRICS_FILE

RUN_MARKERS = ("report.json", "timeline.jsonl", "nodes", "checkpoints")
"""What makes a folder a used one."""

LOCK = ".elastic-chaos.lock"
"""The file a live run holds locked in its folder (its PID, command and start inside, to name it)."""

RUN_OUTPUTS = frozenset({
    *RUN_MARKERS, LOCK, ".elastic-chaos.reserve", "report.html", "summary.md", "timeline.png",
    "timeline.png.tmp.png", "workdir",
    "etcd-data", "etcd.log", "watchdog.log", "port-forward.log", "node-disks", "storage", METRICS_FILE,
    FINAL_STATE_FOLDER, CORRUPTED_ORIGINALS, SHARD_ORIGINALS,
})
"""Everything a run (its platform, its report) writes into its folder: what overwriting deletes."""

_OURS = ("report.json", "timeline.jsonl")
_PROBE = ".write-check-"
"""The prefix of the file the write check makes (and removes at once)."""


@dataclass
class Claim:
    """A report folder owned by this process for one run: its lock is held until ``release``."""

    path: Path
    fd: int | None

    def release(self) -> None:
        """Give the folder up: the lock file goes, then the lock. Idempotent."""
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            (self.path / LOCK).unlink()
        os.close(self.fd)
        self.fd = None


def claim(path: Path, *, overwrite: bool = False) -> Claim:
    """Own ``path`` for one new run: check it, take its lock, delete an old run's files when
    ``overwrite``, create it when missing; the claim holds the lock until released. Blocks briefly
    (a write check). Raises SpecError, saying what to do, when ``path`` is a file, lies under a file,
    cannot be created or written, already holds a run (unless ``overwrite``), or a live run owns it
    (never overwritten). Not idempotent by design: a folder a run has written is refused after."""
    path = check(path, overwrite=overwrite)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"cannot create report folder {path}: {exc.strerror}; pick a folder you can write "
                        "(--report-dir)") from None
    held = Claim(path, _lock(path))
    try:
        if any((path / m).exists() for m in RUN_MARKERS):
            _delete_old_run(path)
        _check_writable(path)
    except BaseException:
        held.release()
        raise
    return held


def prepare(path: Path, *, overwrite: bool = False) -> Path:
    """``claim``, released at once: ``path`` checked, emptied of an old run (``overwrite``) and created;
    returns it absolute. For a caller that only needs the folder ready."""
    held = claim(path, overwrite=overwrite)
    held.release()
    return held.path


def check(path: Path, *, overwrite: bool = False) -> Path:
    """Every refusal of :func:`prepare` (its SpecErrors), with nothing created, deleted or
    written; returns ``path`` absolute. For ``run --dry-run``."""
    path = Path(os.path.abspath(path.expanduser()))
    _refuse_never_ours(path)
    _refuse_file_on_the_way(path)
    _refuse_live(path)
    used = [m for m in RUN_MARKERS if (path / m).exists()]
    if used and not overwrite:
        raise SpecError(f"report folder {path} already holds a run ({', '.join(used)}): a new run there would "
                        "mix its evidence with the old one's. Pick a new folder (--report-dir), or pass "
                        "--overwrite to delete the old run first")
    if used:
        _old_run(path)
    else:
        _refuse_other_files(path)
    return path


def _refuse_never_ours(path: Path) -> None:
    """``/``, the home folder and every folder above it hold a user's files by definition."""
    home = Path(os.path.abspath(Path.home()))
    if path == Path(path.anchor) or path == home or path in home.parents:
        what = "the root folder" if path == Path(path.anchor) else \
            "your home folder" if path == home else f"a folder above your home folder ({home})"
        raise SpecError(f"report folder {path} is {what}, never a report folder (a run writes report.json, "
                        "nodes/, etcd-data/ and checkpoints/ into it), --overwrite or not; give a new folder "
                        "(--report-dir reports/NAME)")


def _refuse_other_files(path: Path) -> None:
    """A folder that holds something but no run is someone else's: refused, overwrite or not."""
    try:
        names = sorted(p.name for p in path.iterdir() if not p.name.startswith(_PROBE) and not p.name.startswith(
            ".elastic-chaos.")) \
            if path.is_dir() else []
    except OSError as exc:
        raise SpecError(f"report folder {path} cannot be listed ({exc.strerror}); pick a folder you can read "
                        "and write (--report-dir)") from None
    if names:
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        raise SpecError(f"report folder {path} already holds {shown} and no run: a report folder must be new, "
                        "empty or one a run wrote (--overwrite replaces only such a run, never other files). "
                        "Pick a new folder (--report-dir)")


def _refuse_file_on_the_way(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise SpecError(f"report folder {path} is a file, not a folder; give a folder path (--report-dir); "
                        "it is created when missing")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise SpecError(f"report folder {path} would lie under {parent}, which is a file; give a "
                                "folder path whose parents are folders (--report-dir)")
            return


def _check_writable(path: Path) -> None:
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise SpecError(f"report folder {path} is not writable ({exc.strerror}); pick a folder you can write "
                        "(--report-dir)") from None


def _old_run(path: Path) -> dict[str, Path]:
    """The entries of a folder that holds a run, when --overwrite may delete them all."""
    entries = {p.name: p for p in path.iterdir()}
    if not any(name in entries for name in _OURS):
        raise SpecError(f"{path} holds {', '.join(n for n in RUN_MARKERS if n in entries)} but no report.json or "
                        "timeline.jsonl: it does not look like an elastic-chaos report folder, so --overwrite "
                        "will not delete it. Pick a new folder (--report-dir)")
    foreign = sorted(n for n in entries if n not in RUN_OUTPUTS and not n.startswith(_PROBE))
    if foreign:
        raise SpecError(f"report folder {path} also holds {', '.join(foreign)}, which no run writes; --overwrite "
                        "deletes only a run's own files. Move them away or pick a new folder (--report-dir)")
    return entries


def _delete_old_run(path: Path) -> None:
    for entry in _old_run(path).values():
        if entry.name == LOCK:
            continue   # ours now
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError as exc:
            raise SpecError(f"--overwrite could not delete {entry}: {exc.strerror}; delete it yourself or pick "
                            "a new folder (--report-dir)") from None


def holder(path: Path) -> str | None:
    """Who owns ``path`` now, in words ("run PID 4242 (elastic-chaos run kill-node ...), started
    12:00:05"), or None when no live run does: its lock is free, or a live local run registered
    with this folder is named instead."""
    lock = path / LOCK
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return _registered_live(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _named(lock)
    finally:
        os.close(fd)   # closing drops the shared lock taken just to test it
    return _registered_live(path)


def _refuse_live(path: Path) -> None:
    who = holder(path)
    if who is not None:
        raise SpecError(f"report folder {path} belongs to a live run ({who}): its files are that run's evidence "
                        "while it runs, and --overwrite never deletes them. Pick a new folder (--report-dir), or "
                        "wait for that run to end")


def _lock(path: Path) -> int:
    """Take ``path``'s lock (a file recreated by the last owner's release is retried); SpecError when
    a live run holds it."""
    lock = path / LOCK
    for _ in range(5):
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise SpecError(f"report folder {path} is not writable ({exc.strerror}); pick a folder you can write "
                            "(--report-dir)") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise SpecError(f"report folder {path} belongs to a live run ({_named(lock)}); pick a new folder "
                            "(--report-dir), or wait for that run to end") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino   # not a file its owner unlinked as we opened it
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps({"pid": os.getpid(), "argv": sys.argv[:8], "at": time.time()}).encode())
            return fd
        os.close(fd)
    raise SpecError(f"could not take the lock of report folder {path}: it kept changing hands")


def _named(lock: Path) -> str:
    """The run a lock file names, from what its owner wrote into it."""
    try:
        raw = json.loads(lock.read_text() or "{}")
    except (OSError, ValueError):
        return "a run whose lock says nothing more"
    argv = " ".join(Path(a).name if i == 0 else a for i, a in enumerate(raw.get("argv") or []))
    at = raw.get("at")
    when = time.strftime(", started %H:%M:%S", time.localtime(at)) if isinstance(at, (int, float)) else ""
    return f"PID {raw.get('pid', '?')}" + (f": {argv}" if argv else "") + when


def _registered_live(path: Path) -> str | None:
    """A live local run registered with ``path`` as its report folder (elastic_chaos.host.registry),
    in words; None when there is none."""
    from elastic_chaos.host.registry import Registry
    for record in Registry().records():
        if Path(record.report_dir).resolve() == path.resolve() and record.runner_alive() \
                and record.runner_pid != os.getpid():
            return f"local run {record.run_id}, runner PID {record.runner_pid}"
    return None
