"""What the toolkit could see of a user's script, and what it could not.

The reference trainer reports everything through ``elastic_chaos.trainer.progress``. A
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_chaos.analysis.outcome import training_finished
from elastic_chaos.analysis.saves import saves
from elastic_chaos.events import CheckpointEv, Event, ProgressEv, of
from elastic_chaos.spec import JobSpec


@dataclass(frozen=True)
class CheckpointSeen:
    """What the run saw of the script's checkpoints."""

    path: str | None = None
    """The --checkpoint path (None: no path was given; saves were reported)."""
    watched: str | None = None
    """Where it was watched on this machine (None: the workdir is not here)."""
    saves_observed: int = 0
    """Saves the file watcher saw."""
    saves_reported: int = 0
    """Saves the script reported (elastic_chaos.trainer.progress)."""
    never_written: bool = False
    files_in_workdir: tuple[str, ...] = ()
    """What the workdir held, when the path was never written."""

    def to_json(self) -> dict[str, Any]:
        if self.path is None:
            return {"path": None, "saves_reported": self.saves_reported}
        out: dict[str, Any] = {"path": self.path, "watched": self.watched, "saves_observed": self.saves_observed,
                               "never_written": self.never_written}
        if self.files_in_workdir:
            out["files_in_workdir"] = list(self.files_in_workdir)
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> CheckpointSeen:
        path, watched = raw.get("path"), raw.get("watched")
        return cls(path=None if path is None else str(path), watched=None if watched is None else str(watched),
                   saves_observed=_count(raw.get("saves_observed")), saves_reported=_count(raw.get("saves_reported")),
                   never_written=raw.get("never_written") is True,
                   files_in_workdir=tuple(str(f) for f in raw.get("files_in_workdir") or []))


@dataclass(frozen=True)
class ScriptObservation:
    """report.json's ``observation``: what could be seen of a user's script, and what not."""

    script: tuple[str, ...] = ()
    workdir: str | None = None
    unit: str = "step"
    """What the script's progress counts (step, epoch, iteration, ...)."""
    progress_regex: str | None = None
    resume_regex: str | None = None
    progress: str = "none"
    """Where progress came from: elastic_chaos.trainer.progress, progress_regex, both, or none."""
    steps_observed: int = 0
    resume: str = ""
    """Where resumed steps came from, or that they were inferred."""
    checkpoint: CheckpointSeen | None = None
    notes: tuple[str, ...] = ()
    """What was inferred or could not be measured, in words."""
    node_local: bool = False
    """Each node worked in a folder of its own (JobSpec.node_local_workdir), lost with it."""
    finished: bool = False
    """The job's training finished during the run (an agent said its worker group finished)."""

    def to_json(self) -> dict[str, Any]:
        return {"script": list(self.script), "workdir": self.workdir, "unit": self.unit, "node_local": self.node_local,
                "finished": self.finished,
                "progress_regex": self.progress_regex, "resume_regex": self.resume_regex,
                "progress": self.progress, "steps_observed": self.steps_observed, "resume": self.resume,
                "checkpoint": self.checkpoint.to_json() if self.checkpoint else None, "notes": list(self.notes)}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ScriptObservation:
        ckpt = raw.get("checkpoint")

        def text(key: str) -> str | None:
            v = raw.get(key)
            return None if v is None else str(v)

        return cls(script=tuple(str(a) for a in raw.get("script") or []), workdir=text("workdir"),
                   unit=text("unit") or "step", progress_regex=text("progress_regex"),
                   resume_regex=text("resume_regex"), progress=text("progress") or "none",
                   steps_observed=_count(raw.get("steps_observed")), resume=text("resume") or "",
                   checkpoint=CheckpointSeen.from_json(ckpt) if isinstance(ckpt, dict) else None,
                   notes=tuple(str(n) for n in raw.get("notes") or [] if isinstance(n, str)),
                   node_local=raw.get("node_local") is True, finished=raw.get("finished") is True)


def _count(v: Any) -> int:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else 0


def summarize(events: Sequence[Event], job: JobSpec | None, workdir: Path | None, *,
              node_workdirs: Mapping[str, Path] | None = None) -> ScriptObservation | None:
    """report.json's ``observation`` block for a script job (None for the reference trainer).
    ``node_workdirs``: each node's own folder where the checkpoint path was watched on
    node-local disks (JobSpec.node_local_workdir)."""
    if job is None or not job.script:
        return None
    obs = job.observe
    steps = of(events, ProgressEv.STEP)
    by_regex = [e for e in steps if e.data.via == "regex"]
    reported = [e for e in steps if e.data.via is None]
    loaded = of(events, CheckpointEv.LOADED)
    notes: list[str] = [e.data.why or "" for e in of(events, ProgressEv.UNPARSED)]
    resume = _resume_source(loaded, obs.resume_regex)
    if by_regex:
        notes.append(f"{obs.unit}s are timed by the worker's own output (when it grew to hold the line: within "
                     "~10 ms where the worker's file is read, ~0.1 s from its agent's copy); the script stamps none")
        if any(e.data.world_size_from == "agent" for e in by_regex):
            notes.append("world size is the agent's rendezvous result (nodes x nproc_per_node)")
        notes.append("exactly-once sample accounting needs sample ranges, which a log line does not "
                     "carry (two-line integration, docs/INTEGRATE.md)")
    if resume.startswith("inferred"):
        notes.append(f"the {obs.unit} each restart resumed from (and so lost progress) is inferred from its first "
                     f"{obs.unit} after the restart: pass --resume-regex, or report loads with "
                     "elastic_chaos.trainer.progress, to "
                     "measure it")
    raced = {e.data.path: e for e in of(events, CheckpointEv.CONCURRENT_WRITES)}   # the latest count per path
    notes += [_raced(e) for e in raced.values()]
    if job.node_local_workdir:
        notes.append("each node worked in a folder of its own, lost with the node (--node-local-workdir): "
                     "a save is its node's; a lost node's saves went with it")
    return ScriptObservation(
        node_local=job.node_local_workdir, finished=training_finished(events) is not None,
        script=tuple(job.script), workdir=str(workdir) if workdir else job.workdir, unit=obs.unit,
        progress_regex=obs.progress_regex, resume_regex=obs.resume_regex,
        progress=_progress_source(by_regex, reported), steps_observed=len(steps), resume=resume,
        checkpoint=_checkpoint(events, obs.checkpoint, workdir) if not job.node_local_workdir
        else _node_local_checkpoint(events, obs.checkpoint, node_workdirs or {}), notes=tuple(notes))


def _raced(e: Event) -> str:
    """The warning of a checkpoint path that more than one writer wrote at once (elastic_chaos.watchers.inotify)."""
    d = e.data
    return (f"the checkpoint {d.path} was written by {d.writes} writers at once, at {d.bursts} save(s): every "
            "node's local rank 0 saving the same path in the shared workdir? Such writes race (a torn file, a "
            "restart that cannot load it): save from global rank 0 only, or give each node a folder of its own "
            "with --node-local-workdir")


def _progress_source(by_regex: list[Event], reported: list[Event]) -> str:
    if by_regex and reported:
        return "elastic_chaos.trainer.progress and progress_regex (steps counted twice: use one)"
    if by_regex:
        return "progress_regex"
    return "elastic_chaos.trainer.progress" if reported else "none"


def _resume_source(loaded: list[Event], resume_regex: str | None) -> str:
    if any(e.data.via == "regex" for e in loaded):
        return "resume_regex"
    if loaded:
        return "elastic_chaos.trainer.progress"
    if resume_regex:
        return "inferred from the first progress after a restart (resume_regex matched no line)"
    return "inferred from the first progress after a restart"


def _checkpoint(events: Sequence[Event], path: str | None, workdir: Path | None) -> CheckpointSeen | None:
    saved = saves(events)
    if path is None:
        return CheckpointSeen(saves_reported=len(saved)) if saved else None
    watched = _resolve(path, workdir)
    observed = saves(events, via="file")
    never = watched is not None and not observed
    return CheckpointSeen(path=path, watched=str(watched) if watched else None, saves_observed=len(observed),
                          never_written=never,
                          files_in_workdir=tuple(listing(workdir)) if never and workdir is not None else ())


def _node_local_checkpoint(events: Sequence[Event], path: str | None,
                           folders: Mapping[str, Path]) -> CheckpointSeen | None:
    """The checkpoint path in every node's own folder: watched as ``<disks>/*/<path>``."""
    if path is None or Path(path).is_absolute():
        return _checkpoint(events, path, None)
    observed = saves(events, via="file")
    if not folders:
        return CheckpointSeen(path=path, saves_observed=len(observed))
    parent = next(iter(folders.values())).parent
    never = not observed
    held = tuple(f"{node}/{name}" for node, folder in sorted(folders.items()) if folder.is_dir()
                 for name in listing(folder)) if never else ()
    return CheckpointSeen(path=path, watched=str(parent / "*" / path), saves_observed=len(observed),
                          never_written=never, files_in_workdir=held)


def _resolve(path: str, workdir: Path | None) -> Path | None:
    p = Path(path)
    if p.is_absolute():
        return p
    return workdir / p if workdir is not None else None


def listing(workdir: Path, limit: int = 12) -> list[str]:
    """What ``workdir`` holds (folders end in /), the first ``limit`` names."""
    try:
        names = sorted(str(p.relative_to(workdir)) + ("/" if p.is_dir() else "") for p in workdir.iterdir())
    except OSError:
        return []
    return names[:limit] + ([f"... {len(names) - limit} more"] if len(names) > limit else [])


def checks(seen: ScriptObservation | None) -> list[tuple[bool | None, str]]:
    """The checks every script run shares, as (passed, reason) pairs (None: could not be checked)."""
    if seen is None:
        return []
    out: list[tuple[bool | None, str]] = []
    if seen.progress_regex and not seen.steps_observed:
        out.append((False, f"--progress-regex {seen.progress_regex!r} matches the script's progress lines: it "
                           "matched none of them (compare it with nodes/*.log)"))
    ckpt = seen.checkpoint
    if ckpt and ckpt.path:
        if ckpt.watched is None:
            where = "the nodes' own folders are" if seen.node_local else "the job's workdir is"
            out.append((None, f"whether the script saved to {ckpt.path!r}: {where} not on this machine"))
        elif ckpt.never_written:
            out.append(_never_written(ckpt, seen))
        else:
            # a poll sees a save once the file held still for a poll: faster saves merge into one
            out.append((True, f"the script saved to {ckpt.path!r}: {ckpt.saves_observed} save(s) seen up to the "
                              "end of the run (the path is polled: saves less than 0.4 s apart count once)"))
    return out


def _never_written(ckpt: CheckpointSeen, seen: ScriptObservation) -> tuple[bool | None, str]:
    """Nothing was written at the watched path: a wrong path when the job ran to its end, else a wrong path or a
    script that saves only at its end (both leave the path empty while it trains)."""
    files = ", ".join(ckpt.files_in_workdir) or "nothing"
    where = f"(watched {ckpt.watched}; the workdir holds: {files})"
    if seen.finished:
        return (False, f"the script saves to {ckpt.path!r}: nothing was written there, though the job trained to "
                       f"its end {where}. Pass --checkpoint as the file or folder the script saves to, relative to "
                       "--workdir")
    return (None, f"whether the script saves to {ckpt.path!r}: nothing was written there while the run watched "
                  f"{where}: a wrong path (pass --checkpoint as the file or folder the script saves to, relative to "
                  "--workdir), or a script that saves only at its end")
