"""Where rules meet requests: the daemon's live rule state, its waits and its pauses.

Every request the daemon serves passes :meth:`Engine.gate` before it is done
(crash points that hold *before* the op, hangs, latency, the throughput cap,
then injected errors) and :meth:`Engine.after` once it is done (the crash points
that hold *after* it). A wait is one loop over one condition variable: setting
or clearing a rule, releasing a pause, an INTERRUPT from the kernel and the
unmount all wake it, and it re-reads the rules, so a cleared rule frees its ops
at once.

A caller killed while its op waits cannot die until the op is answered: the
kernel waits for a request already handed to the daemon without a timeout. So
each wait checks its caller (a pending SIGKILL in ``/proc/<tid>/status``, or the
task gone) and gives up with :class:`CallerGone`; the daemon answers EINTR
without doing the op, which is what a crash at that point leaves behind.

A stale-read rule holds nothing: it changes what some callers are answered. The
engine says which callers it covers (:meth:`Engine.stale`) and which paths it
tracks (:meth:`Engine.tracked`), and tells its ``on_stale`` listener (the
daemon's :class:`~elastic_chaos.storagefs.stale.StaleView`) when the first such
rule is set and when the last one goes.
"""
from __future__ import annotations

import errno
import random
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from elastic_chaos.storagefs.callers import dying, node_of, tgid
from elastic_chaos.storagefs.oplog import OpLog
from elastic_chaos.storagefs.rules import (
    MUTATING,
    CrashPoint,
    Errors,
    Hang,
    Kind,
    Latency,
    NoSpace,
    ReadOnly,
    Rule,
    SavePoint,
    StaleRead,
    Throttle,
    matches,
    to_json,
)

POLL_S = 0.2
"""How often a wait re-checks its caller when nothing wakes it."""


class CallerGone(Exception):
    """The caller of a waiting op was killed: answer EINTR, do not do the op."""


class Injected(Exception):
    """A rule fails this op with ``errno``."""

    def __init__(self, err: int, rule: str) -> None:
        super().__init__(err, rule)
        self.errno, self.rule = err, rule


@dataclass
class OpCtx:
    """One request as the rules see it."""

    kind: Kind
    path: str
    tid: int
    dst: str | None = None
    size: int = 0
    written: int = 0
    """Bytes the handle wrote before this op (for mid-write)."""
    fh: int | None = None
    """The handle the op is on (read, write, flush, fsync): the op log ties it to its save."""
    writes_data: bool = False
    """An open or create for writing (read-only refuses it)."""
    limit: int | None = None
    """Set by a no-space rule: how many of ``size`` bytes may be written."""
    cut: tuple[int, str] | None = None
    """Set at a mid-write crash point: how many bytes go before the pause, and the rule."""
    stalled_s: float = 0.0
    rules: list[str] = field(default_factory=list)
    _pid: int | None = None
    _node: tuple[str | None] | None = None

    @property
    def pid(self) -> int | None:
        if self._pid is None:
            self._pid = tgid(self.tid)
        return self._pid

    @property
    def node(self) -> str | None:
        """The job's node the caller belongs to (callers.node_of), read once per op."""
        if self._node is None:
            self._node = (node_of(self.pid),)
        return self._node[0]

    def touched(self, name: str) -> None:
        if name not in self.rules:
            self.rules.append(name)


@dataclass
class _Active:
    name: str
    rule: Rule
    node: str | None = None
    """Only callers of this node of the job (None: every caller)."""
    deadline: float | None = None
    remaining: int | None = None
    rng: random.Random | None = None
    admitted: int = 0
    next_free: float = 0.0


@dataclass
class Pause:
    """An op held at a crash point. ``state``: held, released, caller-killed or unmount."""

    id: int
    point: str
    path: str
    dst: str | None
    pid: int | None
    tid: int
    t: float
    rule: str
    bytes: int | None = None
    state: str = "held"
    node: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


BEFORE: dict[SavePoint, tuple[Kind, ...]] = {SavePoint.BEFORE_FSYNC: (Kind.FSYNC,),
                                             SavePoint.BEFORE_RENAME: (Kind.RENAME,),
                                             SavePoint.BEFORE_UNLINK: (Kind.UNLINK,)}
AFTER: dict[SavePoint, tuple[Kind, ...]] = {SavePoint.AFTER_CREATE: (Kind.CREATE, Kind.OPEN),
                                            SavePoint.AFTER_RENAME: (Kind.RENAME,)}


class Engine:
    def __init__(self, oplog: OpLog) -> None:
        self._cond = threading.Condition()
        self._rules: dict[str, _Active] = {}
        self._pauses: list[Pause] = []
        self._closed = False
        self._log = oplog
        self.on_stale: Callable[[bool], None] | None = None
        """Told True when a stale-read rule becomes active with none before, False when the last one goes
        (called with the engine's lock held: it must not call back into the engine)."""
        self._stale_on = False

    # -- the controller's side ---------------------------------------------------------
    def set(self, name: str, rule: Rule, node: str | None = None) -> None:
        """Activate ``rule`` as ``name`` (replacing a rule of that name), for the callers of
        ``node`` only when given (callers.node_of)."""
        now = time.monotonic()
        active = _Active(name, rule, node)
        if isinstance(rule, Hang) and rule.seconds is not None:
            active.deadline = now + rule.seconds
        if isinstance(rule, Errors):
            active.remaining, active.rng = rule.count, random.Random(rule.seed)
        with self._cond:
            self._rules[name] = active
            self._log.write(t=time.time(), op="rule-set", rule=name, detail=_describe(rule), node=node)
            self._stale_changed()
            self._cond.notify_all()

    def clear(self, name: str | None = None) -> list[str]:
        """Deactivate rule ``name`` (every rule when None); returns the names cleared. Ops the
        rules held go on, those a crash point of that name holds included (its rule is
        spent, so its name is not in the answer). Idempotent."""
        with self._cond:
            names = list(self._rules) if name is None else [name] if name in self._rules else []
            for n in names:
                self._drop(n, "rule-cleared")
            for p in self._pauses:
                if p.state == "held" and name in (None, p.rule):
                    p.state = "released"
            self._cond.notify_all()
            return names

    def rules(self) -> dict[str, Rule]:
        with self._cond:
            self._expire()
            return {n: a.rule for n, a in self._rules.items()}

    def stale(self, ctx: OpCtx, *, any_path: bool = False) -> str | None:
        """The stale-read rule that covers ``ctx``'s caller and path (its name), or None; ``any_path``:
        whatever the path (a listing: the view holds only the paths the rules track). A rule for every
        node covers the callers that belong to a node of the job only: the toolkit's own reads (no
        node) always see the volume as it is."""
        if not self._stale_on:
            return None
        with self._cond:
            rules = [a for a in self._rules.values() if isinstance(a.rule, StaleRead)]
        for a in rules:
            if (any_path or matches(a.rule.path, ctx.path)) and ctx.node is not None and a.node in (None, ctx.node):
                return a.name
        return None

    def tracked(self, path: str) -> bool:
        """Whether a change of ``path`` is to be remembered for some stale reader (an active
        stale-read rule's pattern matches it)."""
        if not self._stale_on:
            return False
        with self._cond:
            return any(isinstance(a.rule, StaleRead) and matches(a.rule.path, path) for a in self._rules.values())

    def busy(self) -> bool:
        """Whether a request may have to wait (a rule or a held pause): serve it off the reader."""
        return bool(self._rules) or any(p.state == "held" for p in self._pauses)

    def pauses(self) -> list[Pause]:
        with self._cond:
            return list(self._pauses)

    def wait_pause(self, after: int, timeout_s: float) -> Pause | None:
        """The first pause with an id above ``after`` (held or already over), waiting up to
        ``timeout_s`` for it; None when none came."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                found = next((p for p in self._pauses if p.id > after), None)
                left = deadline - time.monotonic()
                if found or left <= 0 or self._closed:
                    return found
                self._cond.wait(min(left, POLL_S))

    def release(self, pause_id: int | None = None) -> list[Pause]:
        """Let held op ``pause_id`` (every held op when None) go on; returns the pauses it
        released (none when it is over already: idempotent)."""
        with self._cond:
            hit = [p for p in self._pauses if p.state == "held" and pause_id in (None, p.id)]
            for p in hit:
                p.state = "released"
            self._cond.notify_all()
            return hit

    def poke(self) -> None:
        """Wake every wait (the kernel interrupted a request: its caller may be dying)."""
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        """Unmounting: clear every rule and let every held op go on. Idempotent."""
        with self._cond:
            self._closed = True
            for p in self._pauses:
                if p.state == "held":
                    p.state = "unmount"
            for n in list(self._rules):
                self._drop(n, "rule-cleared")
            self._cond.notify_all()

    # -- the data path -----------------------------------------------------------------
    def gate(self, ctx: OpCtx) -> None:
        """Apply the rules to ``ctx`` before its op is done: hold, wait, fail; for a write,
        set ``ctx.limit`` (no space) and ``ctx.cut`` (a mid-write crash point: write that
        many bytes, then call :meth:`hold`). Raises Injected or CallerGone."""
        with self._cond:
            point = self._take_point(ctx, BEFORE)
            if point is not None:
                self._hold(ctx, *point)
            self._wait_for(ctx, lambda: self._hang_due(ctx), Hang)
            began = time.monotonic()
            self._wait_for(ctx, lambda: began + self._delay(ctx), Latency)
            self._throttle(ctx)
            self._inject(ctx)
            ctx.cut = self._mid_write(ctx)

    def after(self, ctx: OpCtx) -> None:
        """Hold ``ctx`` at an after-the-op crash point, if one matches (its op is done).
        Raises CallerGone."""
        with self._cond:
            point = self._take_point(ctx, AFTER)
            if point is not None:
                self._hold(ctx, *point)

    def hold(self, ctx: OpCtx, point: SavePoint, rule: str) -> None:
        """Hold ``ctx`` as a pause at ``point`` until released. Raises CallerGone."""
        with self._cond:
            self._hold(ctx, point, rule)

    # -- inside the lock ---------------------------------------------------------------
    def _drop(self, name: str, why: str) -> None:
        if self._rules.pop(name, None) is not None:
            self._log.write(t=time.time(), op=why, rule=name)
        self._stale_changed()

    def _stale_changed(self) -> None:
        on = any(isinstance(a.rule, StaleRead) for a in self._rules.values())
        if on != self._stale_on:
            self._stale_on = on
            if self.on_stale is not None:
                self.on_stale(on)

    def _expire(self) -> None:
        now = time.monotonic()
        for a in list(self._rules.values()):
            if a.deadline is not None and a.deadline <= now:
                self._drop(a.name, "rule-expired")

    def _matching(self, ctx: OpCtx, kind: type) -> list[_Active]:
        return [a for a in self._rules.values() if isinstance(a.rule, kind) and ctx.kind in a.rule.ops
                and _applies(a, ctx)]

    def _wait_for(self, ctx: OpCtx, due: Callable[[], float | None], kind: type | None) -> None:
        """Wait until ``due()`` (a monotonic time; None: not while things stay as they are)
        has passed; the rules of ``kind`` that made it wait are noted on ``ctx``."""
        names = [a.name for a in self._matching(ctx, kind)] if kind else []
        waited, start = False, time.monotonic()
        while not self._closed:
            self._expire()
            end = due()
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                break
            waited = True
            if dying(ctx.tid):
                ctx.stalled_s += time.monotonic() - start
                raise CallerGone
            self._cond.wait(POLL_S if left is None else min(left, POLL_S))
        if waited:
            ctx.stalled_s += time.monotonic() - start
            for n in names:
                ctx.touched(n)

    def _hang_due(self, ctx: OpCtx) -> float | None:
        hangs = self._matching(ctx, Hang)
        if any(a.deadline is None for a in hangs):
            return None
        return max((a.deadline for a in hangs if a.deadline is not None), default=0.0)

    def _delay(self, ctx: OpCtx) -> float:
        return sum(a.rule.delay_s for a in self._matching(ctx, Latency) if isinstance(a.rule, Latency))

    def _throttle(self, ctx: OpCtx) -> None:
        """A write waits for its slot: it starts when the bytes before it have had their time
        at the cap (its own time runs while it is written), so a stream of writes takes
        total bytes / cap however fast the disk is."""
        now = time.monotonic()
        booked: dict[str, float] = {}
        for a in self._matching(ctx, Throttle):
            assert isinstance(a.rule, Throttle)
            start = max(now, a.next_free)
            a.next_free = start + ctx.size / a.rule.bytes_per_s
            booked[a.name] = start
        if booked:
            self._wait_for(ctx, lambda: max((t for n, t in booked.items() if n in self._rules), default=0.0),
                           Throttle)

    def _inject(self, ctx: OpCtx) -> None:
        mutating = ctx.kind in MUTATING or ctx.writes_data
        for a in list(self._rules.values()):
            rule = a.rule
            if not _applies(a, ctx):
                continue
            if isinstance(rule, ReadOnly) and mutating:
                raise Injected(errno.EROFS, a.name)
            if isinstance(rule, Errors) and ctx.kind in rule.ops:
                self._maybe_fail(a, rule)
            if isinstance(rule, NoSpace) and ctx.kind in rule.ops:
                left = rule.after_bytes - a.admitted
                if left <= 0:
                    raise Injected(errno.ENOSPC, a.name)
                take = min(ctx.size, left)
                a.admitted += take
                if take < ctx.size:
                    ctx.limit = take
                    ctx.touched(a.name)

    def _maybe_fail(self, a: _Active, rule: Errors) -> None:
        if a.remaining is not None:
            a.remaining -= 1
            if a.remaining <= 0:
                self._drop(a.name, "rule-spent")
            raise Injected(rule.errno, a.name)
        assert a.rng is not None and rule.fraction is not None
        if a.rng.random() < rule.fraction:
            raise Injected(rule.errno, a.name)

    def _take_point(self, ctx: OpCtx, points: dict[SavePoint, tuple[Kind, ...]]) -> tuple[SavePoint, str] | None:
        for a in list(self._rules.values()):
            rule = a.rule
            if not isinstance(rule, CrashPoint) or ctx.kind not in points.get(rule.point, ()):
                continue
            if ctx.kind is Kind.OPEN and not ctx.writes_data:
                continue
            if _applies(a, ctx):
                self._drop(a.name, "rule-spent")
                return rule.point, a.name
        return None

    def _mid_write(self, ctx: OpCtx) -> tuple[int, str] | None:
        if ctx.kind is not Kind.WRITE:
            return None
        for a in list(self._rules.values()):
            rule = a.rule
            if (isinstance(rule, CrashPoint) and rule.point is SavePoint.MID_WRITE and _applies(a, ctx, dst=False)
                    and ctx.written <= rule.after_bytes < ctx.written + ctx.size):
                self._drop(a.name, "rule-spent")
                return rule.after_bytes - ctx.written, a.name
        return None

    def _hold(self, ctx: OpCtx, point: SavePoint, rule: str) -> None:
        pause = Pause(id=len(self._pauses) + 1, point=point.value, path=ctx.path, dst=ctx.dst, pid=ctx.pid,
                      tid=ctx.tid, t=time.time(), rule=rule,
                      bytes=ctx.written if ctx.kind is Kind.WRITE else None, node=ctx.node)
        ctx.touched(rule)
        self._pauses.append(pause)
        self._log.write(t=pause.t, op="pause", pause=pause.id, point=pause.point, path=pause.path, dst=pause.dst,
                        pid=pause.pid, tid=pause.tid, rule=rule, bytes=pause.bytes, node=pause.node)
        self._cond.notify_all()
        try:
            self._wait_for(ctx, lambda: None if pause.state == "held" else 0.0, None)
            if dying(ctx.tid):  # released as its caller was being killed: still a crash here
                raise CallerGone
        except CallerGone:
            pause.state = "caller-killed"
            raise
        finally:
            if pause.state == "held":
                pause.state = "unmount"
            self._log.write(t=time.time(), op="resume", pause=pause.id, dur=time.time() - pause.t,
                            outcome=pause.state, path=pause.path, pid=pause.pid, rule=rule, node=pause.node)


def _applies(a: _Active, ctx: OpCtx, *, dst: bool = True) -> bool:
    """Whether rule ``a`` covers ``ctx``'s path (or its rename target) and its caller's node."""
    if not matches(a.rule.path, ctx.path, ctx.dst if dst else None):
        return False
    return a.node is None or ctx.node == a.node


def _describe(rule: Rule) -> str:
    return ", ".join(f"{k}={v}" for k, v in to_json(rule).items())
