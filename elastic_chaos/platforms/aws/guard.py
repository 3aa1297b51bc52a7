"""The safety catch every destructive game-day call goes through.

A game day on a real cluster must never hurt what it was not aimed at, and
must leave evidence of what it did. So no fault calls AWS or Kubernetes to
change anything directly; it hands the call to :class:`Guard`, which

- in a dry run records the call and makes none (``calls`` is what the dry
  run prints);
- refuses every call unless the run was armed (``--gameday``), or after a
  stop condition fired (only cleanup calls pass then);
- appends to the :class:`AuditLog` before and after each call (what, target,
  when, result), flushed and fsynced, so a crashed run still leaves it;
- writes what must be undone to the :class:`CleanupJournal` (uncordon a node,
  delete a FIS template, stop a FIS experiment) and closes the entry once it
  is undone; ``elastic-chaos cleanup`` (or the next game day) replays entries
  a crashed run left open.

:func:`check_blast_radius` is the other half: it runs on the resolved targets
before the first call of any kind that changes something. :func:`check_fis_template`
admits a FIS template before it is created: only the actions a game day makes
(``ADMITTED_FIS_ACTIONS``), each on its own resource type, and a pod target only
inside the job's namespace and label selector (:class:`PodScope`).
"""
from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from elastic_chaos.errors import SpecError

T = TypeVar("T")


class UnsafeOperation(SpecError):
    """A destructive call was refused: not armed, beyond the blast radius, or stopped."""


@dataclass(frozen=True)
class Call:
    """One API call, as a dry run prints it and the audit log records it."""

    service: str
    """ec2, autoscaling, fis, kubernetes, ..."""
    operation: str
    """The API's own name: TerminateInstances, CreateExperimentTemplate, PatchNode, ..."""
    target: str
    """What it hits: an instance id, a node, a pod, a template id."""
    params: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        params = json.dumps(self.params, sort_keys=True, default=str) if self.params else ""
        return f"{self.service}:{self.operation} {self.target} {params}".rstrip()

    def to_json(self) -> dict[str, Any]:
        return {"service": self.service, "operation": self.operation, "target": self.target, "params": self.params}


def _append(path: Path, record: dict[str, Any]) -> None:
    """One JSON line, appended (O_APPEND), flushed and fsynced: never rewritten."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line      # a crash cut the last line off: never glue onto it
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out: list[dict[str, Any]] = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue   # a line cut off by a crash
    return out


class AuditLog:
    """Append-only JSONL of every destructive call: ``attempt`` before, ``result`` after."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.run_id = run_id

    def record(self, phase: str, call: Call, **extra: Any) -> None:
        _append(self.path, {"t": time.time(), "run": self.run_id, "phase": phase, **call.to_json(), **extra})

    def entries(self, run_id: str | None = None) -> list[dict[str, Any]]:
        return [e for e in _read(self.path) if run_id is None or e.get("run") == run_id]


@dataclass(frozen=True)
class Undo:
    """One pending rollback in the cleanup journal."""

    id: str
    run: str
    kind: str
    """uncordon, delete-fis-template, stop-fis-experiment."""
    target: str
    detail: dict[str, Any] = field(default_factory=dict)


class CleanupJournal:
    """Append-only JSONL: ``open`` when something needs undoing, ``close`` once undone."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.run_id = run_id
        self._lock = threading.Lock()

    def open(self, kind: str, target: str, **detail: Any) -> Undo:
        undo = Undo(id=uuid.uuid4().hex, run=self.run_id, kind=kind, target=target, detail=detail)
        with self._lock:
            _append(self.path, {"op": "open", "t": time.time(), "id": undo.id, "run": undo.run, "kind": kind,
                                "target": target, "detail": detail})
        return undo

    def close(self, undo: Undo, result: str) -> None:
        with self._lock:
            _append(self.path, {"op": "close", "t": time.time(), "id": undo.id, "run": self.run_id,
                                "closed_run": undo.run, "result": result})

    def pending(self) -> list[Undo]:
        """Entries opened and never closed, newest first (undo in reverse order)."""
        opened: dict[str, Undo] = {}
        for e in _read(self.path):
            if e.get("op") == "open":
                opened[e["id"]] = Undo(id=e["id"], run=e.get("run", "?"), kind=e["kind"], target=e["target"],
                                       detail=dict(e.get("detail") or {}))
            elif e.get("op") == "close":
                opened.pop(e.get("id", ""), None)
        return list(reversed(opened.values()))


class Guard:
    """Gate of every destructive call (see the module docstring). Thread-safe."""

    def __init__(self, *, dry_run: bool, armed: bool, audit: AuditLog | None = None,
                 journal: CleanupJournal | None = None) -> None:
        self.dry_run = dry_run
        self.armed = armed
        self.audit = audit
        self.journal = journal
        self.calls: list[Call] = []
        """Every destructive call asked for, made or (dry run) not."""
        self._stopped: str | None = None
        self._lock = threading.Lock()

    @property
    def stopped(self) -> str | None:
        """Why the run was stopped (no more destructive calls but cleanup), or None."""
        return self._stopped

    def stop(self, reason: str) -> None:
        with self._lock:
            self._stopped = self._stopped or reason

    def mutate(self, call: Call, fn: Callable[[], T], *, cleanup: bool = False) -> T | None:
        """Make ``call`` through ``fn`` (audited), or record it only (dry run: returns None).

        Raises UnsafeOperation when not armed, or when stopped and ``call`` is not a
        cleanup call; re-raises ``fn``'s error after auditing it."""
        with self._lock:
            self.calls.append(call)
            if self.dry_run:
                return None
            if not self.armed:
                raise UnsafeOperation(f"refused {call.describe()}: destructive calls need --gameday "
                                      "(look first with --dry-run)")
            if self._stopped and not cleanup:
                raise UnsafeOperation(f"refused {call.describe()}: the game day was stopped ({self._stopped})")
        if self.audit is not None:
            self.audit.record("attempt", call, cleanup=cleanup)
        try:
            result = fn()
        except Exception as exc:
            if self.audit is not None:
                self.audit.record("result", call, result="error", error=str(exc)[:500], cleanup=cleanup)
            raise
        if self.audit is not None:
            self.audit.record("result", call, result="ok", cleanup=cleanup)
        return result

    def remember(self, kind: str, target: str, **detail: Any) -> Undo | None:
        """Journal a rollback still to do (nothing in a dry run or without a journal)."""
        if self.dry_run or self.journal is None:
            return None
        return self.journal.open(kind, target, **detail)

    def done(self, undo: Undo | None, result: str = "ok") -> None:
        if undo is not None and self.journal is not None:
            self.journal.close(undo, result)


@dataclass(frozen=True)
class SafetyLimits:
    """How much of the job one game day may hit."""

    max_nodes: int = 1
    """At most this many nodes (instances) per fault."""
    max_percent: float = 50.0
    """At most this share of the job's nodes per fault, in percent."""

    def __post_init__(self) -> None:
        if self.max_nodes < 1:
            raise SpecError("--max-nodes must be at least 1")
        if not 0 < self.max_percent <= 100:
            raise SpecError("--max-percent must be in (0, 100]")


def check_blast_radius(targets: list[str], population: list[str], limits: SafetyLimits) -> None:
    """Refuse (UnsafeOperation) unless every target is one of the job's nodes and there are
    no more of them than the limits allow. Called before any destructive call."""
    if not targets:
        raise UnsafeOperation("no target resolved: nothing matches the given job/labels/tags")
    strays = sorted(set(targets) - set(population))
    if strays:
        raise UnsafeOperation(f"{strays} are not nodes of the targeted job/tags; refusing to hit them")
    share = 100.0 * len(set(targets)) / len(set(population))
    if len(set(targets)) > limits.max_nodes:
        raise UnsafeOperation(f"blast radius: {len(set(targets))} node(s) targeted, --max-nodes is "
                              f"{limits.max_nodes}; lower --count or raise --max-nodes deliberately")
    if share > limits.max_percent + 1e-9:
        raise UnsafeOperation(f"blast radius: {len(set(targets))} of {len(set(population))} node(s) is "
                              f"{share:.0f}%, --max-percent is {limits.max_percent:g}%; lower --count or raise "
                              "--max-percent deliberately")


ADMITTED_FIS_ACTIONS: dict[str, str] = {
    "aws:ec2:send-spot-instance-interruptions": "aws:ec2:spot-instance",
    "aws:ec2:asg-insufficient-instance-capacity-error": "aws:ec2:autoscaling-group",
    "aws:eks:pod-network-latency": "aws:eks:pod",
    "aws:eks:pod-network-packet-loss": "aws:eks:pod",
}
"""The FIS actions a game day may start, each with the one resource type it may act on."""


@dataclass(frozen=True)
class PodScope:
    """The job's pods: the only pods a FIS template may aim at."""

    namespace: str
    """The job's namespace."""
    selector: str
    """The label selector of the job's worker pods (``key=value,...``)."""


def _terms(selector: str) -> set[str]:
    return {t.strip().replace(" ", "") for t in selector.split(",") if t.strip()}


def check_fis_template(template: dict[str, Any], pods: PodScope | None) -> None:
    """Refuse (UnsafeOperation) a template with an action not in ADMITTED_FIS_ACTIONS, an
    action on a resource type not its own, or an ``aws:eks:pod`` target that could select a
    pod outside ``pods`` (another namespace, a selector without every term of the job's,
    resource ARNs or tags, a selection other than ALL). A read of the template only."""
    targets = template.get("targets") or {}
    for name, action in (template.get("actions") or {}).items():
        action_id = action.get("actionId")
        kind = ADMITTED_FIS_ACTIONS.get(str(action_id))
        if kind is None:
            raise UnsafeOperation(f"refused FIS action {action_id} ({name}): a game day starts only "
                                  f"{', '.join(ADMITTED_FIS_ACTIONS)}")
        for target_name in (action.get("targets") or {}).values():
            got = (targets.get(target_name) or {}).get("resourceType")
            if got != kind:
                raise UnsafeOperation(f"refused FIS action {action_id}: its target {target_name} is {got}, "
                                      f"the action may act on {kind} only")
    for name, target in targets.items():
        if target.get("resourceType") == "aws:eks:pod":
            _check_pods(name, target, pods)


def _check_pods(name: str, target: dict[str, Any], pods: PodScope | None) -> None:
    params = target.get("parameters") or {}
    where = f"refused FIS target {name} (aws:eks:pod {params.get('namespace')}/{params.get('selectorValue')})"
    if pods is None:
        raise UnsafeOperation(f"{where}: no job's pods to confine it to (attach to a job first: --job/--selector)")
    if target.get("resourceArns") or target.get("resourceTags") or target.get("filters"):
        raise UnsafeOperation(f"{where}: a pod target is chosen by namespace and label selector only")
    if params.get("namespace") != pods.namespace:
        raise UnsafeOperation(f"{where}: the job's pods are in namespace {pods.namespace}; refusing to aim at "
                              f"namespace {params.get('namespace')}")
    if params.get("selectorType") != "labelSelector":
        raise UnsafeOperation(f"{where}: selectorType {params.get('selectorType')}; only a labelSelector that "
                              f"holds the job's ({pods.selector}) is admitted")
    missing = sorted(_terms(pods.selector) - _terms(str(params.get("selectorValue") or "")))
    if missing:
        raise UnsafeOperation(f"{where}: the selector lacks {', '.join(missing)} of the job's pods "
                              f"({pods.selector}): it could select pods outside the job; refusing")
    if target.get("selectionMode") != "ALL":
        raise UnsafeOperation(f"{where}: selectionMode {target.get('selectionMode')} lets FIS pick at random; "
                              "the selector must name the pods (selectionMode ALL)")
