"""Watch a running elastic job without touching it: ``elastic-chaos watch``.

Reads the job's rendezvous state from etcd (the same allow-list decoding and
long-poll watch a scenario uses) and, given the folder of its node logs,
its training progress. Nothing is injected and nothing is written to etcd.
The live view shows every rendezvous change (round, participants, waiting
nodes, world size); ``record`` writes the same timeline.jsonl a scenario
writes, then report.json and report.html, so a real interruption in
production can be audited like a chaos run.

A watch sees no fault being injected; it *observes* losses. When a
member of the last complete round is not a participant of the next complete
round (or is gone from the rendezvous when the watch ends), that is a
``fault/observed`` event (``node-lost``) timed at the lost node's last
heartbeat in the rendezvous state, the best evidence of when it died, plus a
``node/lost`` event.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from elastic_chaos.cli.live_console import ConsoleProgress
from elastic_chaos.errors import SetupError, SpecError
from elastic_chaos.events import Event, FaultEv, NodeEv, RdzvEv, RunnerEv, Timeline, field_value
from elastic_chaos.events.fault_events import Observed
from elastic_chaos.events.node_events import Lost
from elastic_chaos.events.rdzv_events import RdzvState
from elastic_chaos.events.runner_events import JobStarted, Phase
from elastic_chaos.host import etcd_v2
from elastic_chaos.options import WEEK_S, option, validate
from elastic_chaos.watchers.api import Watcher
from elastic_chaos.watchers.logs import LogFollower
from elastic_chaos.watchers.rendezvous import RendezvousWatcher

OBSERVED = FaultEv.OBSERVED.name
"""The ``action`` of a ``node/lost`` a watch inferred (no fault was injected)."""


@dataclass(frozen=True)
class WatchOptions:
    """What ``elastic-chaos watch`` was asked to do."""

    etcd: str
    """The rendezvous etcd, HOST:PORT (torchrun's --rdzv-endpoint)."""
    run_id: str
    """The job's rendezvous run id (torchrun's --rdzv-id)."""
    record: Path | None = None
    """Folder to write timeline.jsonl (and report.json/report.html at the end) into."""
    duration_s: float | None = option(None, "stop after this long (default: Ctrl-C)", flag="--duration", above=0,
                                      maximum=WEEK_S, units="s")
    logs: Path | None = None
    """A folder of node logs (``<node>.log``) to follow for training progress."""
    platform: str = "etcd"
    """How the job was reached, recorded as the report's platform."""

    def __post_init__(self) -> None:
        host, _, port = self.etcd.rpartition(":")
        if not host or not port.isdigit():
            raise SpecError(f"--etcd {self.etcd!r} is not HOST:PORT (for example 127.0.0.1:2379)")
        if not self.run_id:
            raise SpecError("--run-id must not be empty (torchrun's --rdzv-id of the job)")
        validate(self)   # --duration: finite, > 0, at most a week
        if self.logs is not None and not self.logs.is_dir():
            raise SpecError(f"--logs {self.logs} is not a folder of node logs")


def check_etcd(endpoint: str, timeout_s: float = 3.0) -> str:
    """The etcd server version at ``endpoint``; SetupError saying what to check when unreachable."""
    try:
        return etcd_v2.server_version(endpoint, timeout_s=timeout_s)
    except etcd_v2.CLIENT_ERRORS as exc:
        raise SetupError(f"cannot reach etcd at {endpoint} ({exc}); pass the job's rendezvous endpoint "
                         "(torchrun --rdzv-endpoint) as --etcd HOST:PORT") from exc


class LossDetector:
    """Turns rendezvous state events into ``fault/observed`` + ``node/lost`` when a
    member of the last complete round is not in the next complete round, or is
    gone from the rendezvous when the watch ends. (A survivor that re-joins
    leaves the participants for a moment before it appears in the wait list:
    absence alone is not a loss.)"""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.members: dict[str, str | None] = {}   # id -> node name, last complete round
        self.round: Any = None
        self.heartbeats: dict[str, float] = {}
        self.present: set[str] = set()
        self.last_seen = 0.0
        timeline.subscribe(self.on_event)

    def on_event(self, e: Event) -> None:
        if e.type != RdzvEv.STATE:
            return
        state: RdzvState = e.data
        self.heartbeats.update(state.heartbeats)
        self.present = {str(p.id) for p in (*state.participants, *state.wait_list)}
        self.last_seen = e.t
        if not state.complete or state.round == self.round:
            return
        now = {str(p.id): p.node for p in state.participants}
        for ident, name in self.members.items():
            if ident not in now:
                self._lost(ident, name, e.t)
        self.members, self.round = now, state.round

    def finish(self) -> None:
        """At the end of the watch: members gone from the rendezvous never came back."""
        for ident, name in self.members.items():
            if self.round is not None and ident not in self.present:
                self._lost(ident, name, self.last_seen)
        self.members = {}

    def _lost(self, ident: str, name: str | None, seen_at: float) -> None:
        beat = self.heartbeats.get(ident)
        at = beat if beat is not None and beat <= seen_at else seen_at
        target = name or ident
        self.timeline.emit(NodeEv.LOST, target, Lost(
            id=ident, action=OBSERVED, last_heartbeat=beat, noticed_at=round(seen_at, 3)), t=at)
        self.timeline.emit(FaultEv.OBSERVED, target, Observed(
            fault="node-lost", id=ident, timed_by="last heartbeat" if beat is not None else "when noticed",
            noticed_at=round(seen_at, 3)), t=at)


class WatchView(ConsoleProgress):
    """The live view: every rendezvous change as a line, a status line on a TTY."""

    def __init__(self, timeline: Timeline, opts: WatchOptions, stream: TextIO | None = None,
                 live: bool | None = None) -> None:
        self.opts = opts
        self.round: Any = None
        self.state = "no rendezvous yet"
        self.participants: list[str] = []
        self.waiting: list[str] = []
        super().__init__(timeline, stream, step_every_s=5.0, live=live, quiet_after_s=30.0)
        self.phase = "watching"

    def status_text(self) -> str:
        step = "" if self.step is None else f" | step {self.step}"
        return (f"[{self.elapsed():6.1f}s] {self.opts.run_id} round {self.round} {self.state} | "
                f"{len(self.participants)} participant(s), {len(self.waiting)} waiting | "
                f"world size {self.world_size if self.world_size is not None else '-'}{step}")

    def on_event(self, e: Event) -> None:
        if e.type == RdzvEv.STATE:
            d: RdzvState = e.data
            self.round = d.round
            self.state = "closed" if d.closed else "complete" if d.complete else "forming"
            self.participants = list(d.nodes())
            self.waiting = list(d.nodes("wait_list"))
            if d.complete and self.step is None:
                self.world_size = len(self.participants)
        super().on_event(e)

    def describe(self, e: Event) -> str | None:
        d = e.data
        if e.type in (RdzvEv.STATE, RdzvEv.ROUND_COMPLETE):
            if e.type == RdzvEv.ROUND_COMPLETE:
                return f"round {d.round} COMPLETE: world of {len(d.participants)} node(s)"
            line = f"round {d.round} {self.state}: participants {list(d.nodes())}"
            if d.wait_list:
                line += f", waiting {list(d.nodes('wait_list'))}"
            return line
        if e.type in (RdzvEv.DELETED, RdzvEv.UNDECODABLE, RdzvEv.REFUSED):
            reason = field_value(d, "reason")
            return f"rendezvous key {e.type.name}" + (f": {reason}" if reason else "")
        if e.type == RunnerEv.WATCHER_DIED:
            return f"WATCHER DIED: {d.watcher}: {d.error}; the watch is blind from here, stopping"
        if e.type == FaultEv.OBSERVED:
            return (f"LOST {e.node}: not in the next complete round (timed by its {d.timed_by}, "
                    f"{(d.noticed_at or e.t) - e.t:.1f}s before it was noticed)")
        if e.type == NodeEv.LOST:
            return None
        return super().describe(e)


def _log_pids(folder: Path) -> Callable[[], dict[int, str]]:
    """Agent PID -> node name, from the first glog line of each ``<node>.log``."""
    cache: dict[int, str] = {}

    def lookup() -> dict[int, str]:
        for path in folder.glob("*.log"):
            if path.stem in cache.values():
                continue
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    for line in f:
                        parts = line.split()
                        if len(parts) > 3 and line[:1] in "IWEF" and parts[2].isdigit():
                            cache[int(parts[2])] = path.stem
                            break
            except OSError:
                continue
        return dict(cache)

    return lookup


@dataclass
class WatchResult:
    events: list[Event]
    record: Path | None
    report_html: Path | None
    interrupted: bool
    errors: list[str] = field(default_factory=list)
    """What went wrong with the watch itself (a watcher that died): each fails its verdict."""


def watch(opts: WatchOptions, *, stream: TextIO | None = None, live: bool | None = None,
          stop: threading.Event | None = None) -> WatchResult:
    """Watch until ``duration_s`` passes, ``stop`` is set, Ctrl-C, or a watcher dies
    (the watch would be blind from then on; ``errors`` names it); blocks.

    Everything started here (watcher threads) is stopped before returning,
    also on Ctrl-C. With ``record``, the folder gets timeline.jsonl as events
    happen and report.json/report.html at the end."""
    version = check_etcd(opts.etcd)
    timeline = Timeline(opts.record / "timeline.jsonl" if opts.record else None)
    timeline.emit(RunnerEv.JOB_STARTED, None, JobStarted(
        run_id=opts.run_id, platform=opts.platform, spec=None, etcd=opts.etcd, passive=True))
    view = WatchView(timeline, opts, stream, live)
    view._say(f"watching rendezvous '{opts.run_id}' in etcd {version} at {opts.etcd} (read-only)"
              + (f", recording to {opts.record}" if opts.record else ""))
    losses = LossDetector(timeline)
    timeline.emit(RunnerEv.PHASE, None, Phase(phase="watching", etcd=opts.etcd, run_id=opts.run_id))
    pids = _log_pids(opts.logs) if opts.logs else dict
    watchers: list[Watcher] = [RendezvousWatcher(timeline, opts.etcd, opts.run_id, pids)]
    if opts.logs is not None:
        logs = opts.logs
        watchers.append(LogFollower(timeline, lambda: {p.stem: p for p in sorted(logs.glob("*.log"))}))
    interrupted = False
    stop = stop or threading.Event()
    try:
        for w in watchers:
            w.start()
        deadline = None if opts.duration_s is None else time.monotonic() + opts.duration_s
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline) \
                and not any(w.died for w in watchers):
            stop.wait(0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic())))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        for w in watchers:
            w.stopping()
        errors = []
        for w in watchers:
            try:
                w.stop()
            except Exception as exc:  # noqa: BLE001 - report every watcher's failure, stop them all
                errors.append(str(exc))
        losses.finish()
        timeline.emit(RunnerEv.PHASE, None, Phase(phase="finished", interrupted=interrupted))
        view.close()
        timeline.close()
    html = _write_record(opts.record, timeline.events(), errors) if opts.record else None
    return WatchResult(events=timeline.events(), record=opts.record, report_html=html, interrupted=interrupted,
                       errors=errors)


def _write_record(folder: Path, events: list[Event], errors: list[str]) -> Path | None:
    from elastic_chaos.reporting.record import write_watch_report
    return write_watch_report(folder, events, errors)
