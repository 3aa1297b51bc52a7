"""What the toolkit could see of a user's script, and what it could not.

The reference trainer reports everything through ``trainer.progress``. A
user's script may report through it too (two-line integration), or not at
all, in which case only its own log lines (``progress_regex``,
``resume_regex``) and its checkpoint file (``checkpoint``) are observed. This
module turns a run's events into report.json's ``observation`` block — where
progress, saves and resumes came from, how many were seen, and notes for
everything that had to be inferred or could not be measured — and into the
checks every run of a script shares (a checkpoint path that was never
written is a wrong path, not a passing run).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chaos.events import CheckpointEv, Event, ProgressEv, of
from chaos.spec import JobSpec

TAIL_LINES = 12


def summarize(events: Sequence[Event], job: JobSpec | None, workdir: Path | None) -> dict[str, Any] | None:
    """report.json's ``observation`` block for a script job (None for the reference trainer)."""
    if job is None or not job.script:
        return None
    obs = job.observe
    steps = of(events, ProgressEv.STEP)
    by_regex = [e for e in steps if e.data.via == "regex"]
    reported = [e for e in steps if e.data.via is None]
    loaded = of(events, CheckpointEv.LOADED)
    notes: list[str] = [e.data.why or "" for e in of(events, ProgressEv.UNPARSED)]
    out: dict[str, Any] = {
        "script": list(job.script), "workdir": str(workdir) if workdir else job.workdir,
        "unit": obs.unit, "progress_regex": obs.progress_regex, "resume_regex": obs.resume_regex,
        "progress": _progress_source(by_regex, reported), "steps_observed": len(steps),
        "resume": _resume_source(loaded, obs.resume_regex),
        "checkpoint": _checkpoint(events, obs.checkpoint, workdir),
        "notes": notes,
    }
    if by_regex:
        notes.append("steps are timed when their log line was read (within ~0.1 s); the script stamps none")
        if any(e.data.world_size_from == "agent" for e in by_regex):
            notes.append("world size is the agent's rendezvous result (nodes x nproc_per_node)")
        notes.append("exactly-once sample accounting needs sample ranges, which a log line does not "
                     "carry (two-line integration, docs/INTEGRATE.md)")
    if out["resume"].startswith("inferred"):
        notes.append("resumed step (and so lost progress) inferred from the first progress after each "
                     "restart: pass --resume-regex, or report loads with trainer.progress, to measure it")
    return out


def _progress_source(by_regex: list[Event], reported: list[Event]) -> str:
    if by_regex and reported:
        return "trainer.progress and progress_regex (steps counted twice: use one)"
    if by_regex:
        return "progress_regex"
    return "trainer.progress" if reported else "none"


def _resume_source(loaded: list[Event], resume_regex: str | None) -> str:
    if any(e.data.via == "regex" for e in loaded):
        return "resume_regex"
    if loaded:
        return "trainer.progress"
    if resume_regex:
        return "inferred from the first progress after a restart (resume_regex matched no line)"
    return "inferred from the first progress after a restart"


def _checkpoint(events: Sequence[Event], path: str | None, workdir: Path | None) -> dict[str, Any] | None:
    saved = of(events, CheckpointEv.SAVED)
    if path is None:
        return {"path": None, "saves_reported": len(saved)} if saved else None
    watched = _resolve(path, workdir)
    observed = [e for e in saved if e.data.via == "file"]
    out: dict[str, Any] = {"path": path, "watched": str(watched) if watched else None,
                           "saves_observed": len(observed), "never_written": watched is not None and not observed}
    if out["never_written"] and workdir is not None:
        out["files_in_workdir"] = _listing(workdir)
    return out


def _resolve(path: str, workdir: Path | None) -> Path | None:
    p = Path(path)
    if p.is_absolute():
        return p
    return workdir / p if workdir is not None else None


def _listing(workdir: Path, limit: int = 12) -> list[str]:
    try:
        names = sorted(str(p.relative_to(workdir)) + ("/" if p.is_dir() else "") for p in workdir.iterdir())
    except OSError:
        return []
    return names[:limit] + ([f"... {len(names) - limit} more"] if len(names) > limit else [])


def checks(summary: dict[str, Any] | None) -> list[tuple[bool, str]]:
    """The checks every script run shares, as (passed, reason) pairs."""
    if summary is None:
        return []
    out: list[tuple[bool, str]] = []
    if summary["progress_regex"] and not summary["steps_observed"]:
        out.append((False, f"--progress-regex {summary['progress_regex']!r} matched a line of the script: "
                           "it matched none (compare it with nodes/*.log)"))
    ckpt = summary.get("checkpoint")
    if ckpt and ckpt.get("path"):
        if ckpt["watched"] is None:
            out.append((True, f"checkpoint {ckpt['path']!r} not watched: the job's workdir is not on this "
                              "machine"))
        elif ckpt["never_written"]:
            files = ", ".join(ckpt.get("files_in_workdir") or []) or "nothing"
            out.append((False, f"the checkpoint path {ckpt['path']!r} was written during the run: it never was "
                               f"(watched {ckpt['watched']}; the workdir holds: {files}). Pass --checkpoint "
                               "as the file or directory the script saves to, relative to --workdir"))
        else:
            out.append((True, f"checkpoint {ckpt['path']!r} written {ckpt['saves_observed']} time(s) during "
                              "the run"))
    return out


_GLOG_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ ")


def script_output(lines: list[str]) -> list[str]:
    """A node log without torchrun's own words: its glog lines, and the agent's
    closing traceback and ChildFailedError summary (which name no cause)."""
    end = len(lines)
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Traceback") and any("torch/distributed/run.py" in x for x in lines[i + 1:i + 6]):
            end = i
            break
    return [x for x in lines[:end] if not _GLOG_LINE.match(x)]


def log_tails(node_logs: dict[str, Path], lines: int = TAIL_LINES) -> list[str]:
    """The last lines the script printed on every node (torchrun's own lines left
    out; the raw log's tail when the script printed nothing), one block per node."""
    out = []
    for name, path in sorted(node_logs.items()):
        try:
            raw = path.read_text(errors="replace").splitlines()
        except OSError:
            raw = ["(no log)"]
        own = script_output(raw)[-lines:]
        text, what = (own, "the script's last") if own else (raw[-lines:], "the log's last")
        out.append(f"--- {name}: {what} {len(text)} lines ({path}) ---\n" + "\n".join(text))
    return out
