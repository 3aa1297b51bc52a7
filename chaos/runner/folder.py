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
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from chaos.errors import SpecError
from chaos.reporting.prometheus import FILE as METRICS_FILE

RUN_MARKERS = ("report.json", "timeline.jsonl", "nodes", "checkpoints")
"""What makes a folder a used one."""

RUN_OUTPUTS = frozenset({
    *RUN_MARKERS, "report.html", "summary.md", "timeline.png", "timeline.png.tmp.png", "workdir",
    "etcd-data", "etcd.log", "watchdog.log", "port-forward.log", "node-disks", "storage", METRICS_FILE,
})
"""Everything a run (its platform, its report) writes into its folder: what overwriting deletes."""

_OURS = ("report.json", "timeline.jsonl")
_PROBE = ".write-check-"
"""The prefix of the file the write check makes (and removes at once)."""


def prepare(path: Path, *, overwrite: bool = False) -> Path:
    """Make ``path`` ready for one new run; returns it absolute. Blocks briefly (a write check).

    Raises SpecError, saying what to do, when ``path`` is a file, lies under a
    file, cannot be created or written, or already holds a run (unless
    ``overwrite``: then the old run's files are deleted first). Creates the
    folder when it is missing. Not idempotent by design: a second call for the
    same folder after a run has written there refuses it.
    """
    path = check(path, overwrite=overwrite)
    if any((path / m).exists() for m in RUN_MARKERS):
        _delete_old_run(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"cannot create report folder {path}: {exc.strerror}; pick a folder you can write "
                        "(--report-dir)") from None
    _check_writable(path)
    return path


def check(path: Path, *, overwrite: bool = False) -> Path:
    """Every refusal of :func:`prepare` (its SpecErrors), with nothing created, deleted or
    written; returns ``path`` absolute. For ``run --dry-run``."""
    path = Path(os.path.abspath(path.expanduser()))
    _refuse_never_ours(path)
    _refuse_file_on_the_way(path)
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
        names = sorted(p.name for p in path.iterdir() if not p.name.startswith(_PROBE)) if path.is_dir() else []
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
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError as exc:
            raise SpecError(f"--overwrite could not delete {entry}: {exc.strerror}; delete it yourself or pick "
                            "a new folder (--report-dir)") from None
