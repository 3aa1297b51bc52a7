"""One game day: resolve, check, (dry run | inject), watch the replacement, clean up.

The order is the safety model:

1. Finish what a crashed earlier run left open (cleanup journal).
2. Resolve the targets with reads only: the job's nodes (or the tagged
   instances), the fault's choice among them; the blast radius is checked here.
3. Print every target and every call the fault will make. ``--dry-run`` stops
   here after walking the fault's code path with a Guard that makes no call.
4. Without ``--gameday`` nothing destructive happens (exit 2).
5. Stop conditions are checked before the first destructive call and all along.
6. Inject (every destructive call audited), hold it for ``--duration`` (link
   faults), watch the replacement arrive, revert, close the journal, write the report folder.

Exit codes: 0 the job got through (and its replacement arrived, where one was
expected), 1 it did not or a stop condition fired, 2 usage/safety refusal.
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic_chaos.errors import SpecError
from elastic_chaos.events import Event, Timeline
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.api import Fault
from elastic_chaos.faults.aws import AwsFault
from elastic_chaos.faults.catalog import fault_class
from elastic_chaos.gameday.cleanup import Replayed, describe, replay
from elastic_chaos.gameday.replacement import ReplacementSplit, split
from elastic_chaos.gameday.stops import StopConditions
from elastic_chaos.platforms.api import Platform
from elastic_chaos.platforms.aws.guard import Guard, UnsafeOperation, check_blast_radius
from elastic_chaos.platforms.aws.targets import AwsSide
from elastic_chaos.reporting.schema import dumps
from elastic_chaos.waiting import eventually
from elastic_chaos.watchers.replacement import ReplacementWatcher

Print = Callable[[str], None]


@dataclass(frozen=True)
class GamedayOptions:
    """What one game day does; the CLI fills it from its flags."""

    fault: Fault
    """The fault, configured (count, targets, notice, duration)."""
    deadline_s: float = 1800.0
    """Stop (and clean up) this long after the start, whatever happens."""
    replacement_timeout_s: float = 900.0
    """How long to wait for the replacement to join after the fault."""
    expect_replacement: bool = True
    """False for insufficient-capacity: no replacement can be had; the job must go on smaller."""
    poll_s: float = 5.0
    """Poll interval of the replacement watcher."""
    report_dir: Path | None = None
    """Where timeline.jsonl and gameday.json go (None: nowhere, e.g. a dry run)."""
    job_failed: Callable[[], str | None] = field(default=lambda: None)
    """Whether the job has failed for good (a stop condition)."""
    core_v1: Any = None
    """Kubernetes client for node joins and journal uncordons (None: no Kubernetes)."""
    rendezvous: Callable[[Timeline], Any] | None = None
    """Starts a rendezvous watcher on the timeline (a context manager), for the rendezvous split."""
    hold_s: float = 0.0
    """How long the fault holds before the game day reverts it, the stop conditions checked every
    poll (link faults: --duration); 0: reverted once the replacement is settled. A held fault's dry
    run walks its revert too, so the calls that end it are listed."""


@dataclass
class GamedayResult:
    code: int
    reasons: list[str] = field(default_factory=list)
    record: FaultRecord | None = None
    split: ReplacementSplit | None = None
    replayed: list[Replayed] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    """The game day's timeline at its end (what its metrics.prom is made from)."""


def run_gameday(platform: Platform, side: AwsSide, opts: GamedayOptions, out: Print = print) -> GamedayResult:
    """Run one game day on an attached platform. Raises UnsafeOperation (exit 2) on refusal."""
    guard = side.guard
    result = GamedayResult(code=0)
    result.replayed = _finish_leftovers(side, opts, out)
    stops = StopConditions(guard, deadline_s=opts.deadline_s, cloudwatch=side.clients.cloudwatch,
                           alarm=side.stop_alarm, job_failed=opts.job_failed)
    fault = opts.fault
    fault.stop_when(stops.reason)
    plan = fault.plan(platform)   # reads only; the blast radius is checked here
    chosen = fault.chosen if isinstance(fault, AwsFault) else []
    if not chosen:   # a Kubernetes fault aims at one pod or node of the job: same limits
        population = [n.name for n in platform.alive_nodes()]
        if plan.target not in population:   # it aims at a machine: count machines
            population = sorted({str(n.labels.get("machine")) for n in platform.alive_nodes()})
        check_blast_radius([str(plan.target)], population, side.limits)
    out(f"game day: {fault.name}, {len(chosen) or 1} target(s) within --max-nodes {side.limits.max_nodes} / "
        f"--max-percent {side.limits.max_percent:g}")
    for line in [t.describe() for t in chosen] or [str(plan.target)]:
        out(f"  target: {line}")
    for step in plan.actions:
        out(f"  step: {step}")
    if guard.dry_run:
        return _dry_run(platform, guard, fault, out, result, revert=opts.hold_s > 0)
    if not guard.armed:
        raise UnsafeOperation("this game day would change real infrastructure: add --gameday to run it "
                              "(the plan above is what it would do; --dry-run lists every call)")
    why = stops.reason()
    if why:
        raise UnsafeOperation(f"not starting: {why}")
    return _live(platform, side, opts, stops, result, out)


def _finish_leftovers(side: AwsSide, opts: GamedayOptions, out: Print) -> list[Replayed]:
    journal = side.guard.journal
    pending = journal.pending() if journal is not None else []
    if not pending:
        return []
    verb = "would finish" if side.guard.dry_run else "finishing"
    out(f"{verb} {len(pending)} rollback(s) an earlier run left open:")
    done = replay(side.guard, aws=side.clients, core_v1=opts.core_v1)
    for r in done:
        out(f"  {describe(r.undo)}: {r.result}")
    if any(not r.closed for r in done) and not side.guard.dry_run:
        raise UnsafeOperation("an earlier run's rollback could not be finished (see above); fix it, then run "
                              "`elastic-chaos cleanup` before another game day")
    return done


def _dry_run(platform: Platform, guard: Guard, fault: Fault, out: Print, result: GamedayResult, *,
             revert: bool) -> GamedayResult:
    scratch = Timeline()
    record = fault.inject(platform, scratch)        # the Guard records every destructive call and makes none
    if revert:
        fault.revert(platform, scratch, record)
    out(f"dry run: {len(guard.calls)} call(s) would be made, none was:")
    for call in guard.calls:
        out(f"  would call {call.describe()}")
    result.reasons.append("dry run: nothing was changed")
    return result


def _live(platform: Platform, side: AwsSide, opts: GamedayOptions, stops: StopConditions,
          result: GamedayResult, out: Print) -> GamedayResult:
    fault = opts.fault
    chosen = fault.chosen if isinstance(fault, AwsFault) else []
    path = opts.report_dir / "timeline.jsonl" if opts.report_dir else None
    if opts.report_dir:
        opts.report_dir.mkdir(parents=True, exist_ok=True)
    timeline = platform.timeline if path is None else Timeline(path)
    watcher = ReplacementWatcher(timeline, side.clients, instances=[t.instance.id for t in chosen],
                                 groups=[t.instance.asg for t in chosen if t.instance.asg],
                                 core_v1=opts.core_v1, interval_s=opts.poll_s)
    rdzv = opts.rendezvous(timeline) if opts.rendezvous else None
    watcher.poll()     # the group's members before the fault, seen before the fault (not racing it)
    watcher.start()
    if rdzv is not None:
        rdzv.__enter__()
    try:
        record = fault.inject(platform, timeline)
        result.record = record
        out(f"injected {fault.name} at {time.strftime('%H:%M:%S', time.localtime(record.injected_at))} "
            f"on {record.target}")
        _hold(opts, stops, result, out)
        _await_replacement(opts, stops, watcher, timeline, record, result, out)
    finally:
        try:
            _revert(platform, fault, timeline, result, out)
        finally:
            watcher.stop()
            if rdzv is not None:
                rdzv.__exit__(None, None, None)
            result.events = timeline.events()
            _write(opts, timeline, result, side)
    return result


def _hold(opts: GamedayOptions, stops: StopConditions, result: GamedayResult, out: Print) -> None:
    """Keep the fault on for ``opts.hold_s``, polling the stop conditions; a stop ends it early
    (the game day failed, exit 1). Blocks; returns at once when nothing is held."""
    if opts.hold_s <= 0:
        return
    out(f"holding {opts.fault.name} for {opts.hold_s:g}s")
    end = time.monotonic() + opts.hold_s
    while (left := end - time.monotonic()) > 0:
        why = stops.reason()
        if why:
            result.code = 1
            result.reasons.append(f"stopped: {why}")
            return
        time.sleep(min(opts.poll_s, left))


def _await_replacement(opts: GamedayOptions, stops: StopConditions, watcher: ReplacementWatcher,
                       timeline: Timeline, record: FaultRecord, result: GamedayResult, out: Print) -> None:
    ids = list((record.hit.detail.get("instances") if record.hit else None) or [])
    stopped = record.detail.get("stopped_because")
    if result.code:     # a stop condition ended the hold
        return
    if stopped:
        result.code, result.reasons = 1, [f"stopped: {stopped}"]
        return
    want_join = opts.core_v1 is not None

    def settled() -> bool:
        """A stop condition fired (the game day failed), or the replacement is in (and rendezvoused)."""
        why = stops.reason()
        if why:
            result.code = 1
            result.reasons.append(f"stopped: {why}")
            return True
        result.split = split(timeline.events(), fault_at=record.injected_at, targets=ids)
        done = result.split.joined_at if want_join else result.split.running_at
        return done is not None and (opts.rendezvous is None or result.split.rendezvous_at is not None)

    if opts.expect_replacement and opts.replacement_timeout_s > 0:
        eventually(settled, timeout_s=opts.replacement_timeout_s, interval_s=min(opts.poll_s, 1.0))
    result.split = split(timeline.events(), fault_at=record.injected_at, targets=ids)
    if not opts.expect_replacement:
        if result.split.running_at is not None:
            result.code = 1
            result.reasons.append(f"a replacement instance ({result.split.instance}) was launched although "
                                  "capacity was withheld: the experiment did not hold")
        return
    if result.code == 0 and (result.split.running_at is None or (want_join and result.split.joined_at is None)):
        result.code = 1
        result.reasons.append(f"no replacement joined within {opts.replacement_timeout_s:.0f}s: "
                              + "; ".join(result.split.missing))
    out(f"replacement: {json.dumps(result.split.to_json())}")


def _revert(platform: Platform, fault: Fault, timeline: Timeline, result: GamedayResult, out: Print) -> None:
    if result.record is not None:
        fault.revert(platform, timeline, result.record)


def _write(opts: GamedayOptions, timeline: Timeline, result: GamedayResult, side: AwsSide) -> None:
    if opts.report_dir is None:
        return
    report = {"schema_version": 1, "platform": "eks", "fault": opts.fault.name, "code": result.code,
              "passed": result.code == 0, "reasons": result.reasons,
              "record": result.record.to_json() if result.record else None,
              "replacement": result.split.to_json() if result.split else None,
              "calls": [c.to_json() for c in side.guard.calls],
              "audit_log": str(side.guard.audit.path) if side.guard.audit else None,
              "expect_replacement": opts.expect_replacement}
    (opts.report_dir / "gameday.json").write_text(dumps(report, indent=2, default=str))
    timeline.close()


LINK_FAULTS = ("latency", "packet-loss")
"""Link faults: on EKS, AWS FIS's pod network actions on one pod of the attached job, held for --duration."""
GAMEDAY_FAULTS = ("spot-interruption", "terminate-instance", "insufficient-capacity", "delete-pod", "drain-node",
                  *LINK_FAULTS)
"""What a game day can do: the AWS faults, and the Kubernetes and link ones on an attached job."""


def make_fault(name: str, **kwargs: Any) -> Fault:
    """A game-day fault by CLI name with its options (kwargs it does not take are ignored)."""
    if name not in GAMEDAY_FAULTS:
        raise SpecError(f"unknown game-day fault {name!r}; choose one of {', '.join(GAMEDAY_FAULTS)}")
    cls = fault_class(name, "eks")
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in kwargs.items() if k in names and v is not None})
