"""torchrun whose agent leaves the rendezvous on the spot interruption notice, before the termination.

    python -m elastic_chaos.trainer.rdzv_notice [torchrun's arguments]    # instead of python -m torch.distributed.run

Why: with elastic_chaos.trainer.rdzv_leave (``--leave-on-sigterm``) the node leaves once SIGTERM came, so
the departing workers' save and exit, the last call, a rendezvous poll and the survivors' restart all
come after the termination, although EC2 announced it two minutes earlier (the interruption notice in
the instance metadata, ``/latest/meta-data/spot/instance-action``). This agent acts on the notice:

1. a thread polls the instance metadata (elastic_chaos.trainer.spot_notice, at
   ``$AWS_EC2_METADATA_SERVICE_ENDPOINT``, else EC2's own address if it answers);
2. on the interruption notice it sends the agent's main thread SIGTERM, as the termination would:
   torch's handler raises ``SignalException`` there, the agent sends its workers SIGTERM and waits for
   them (the reference trainer saves a checkpoint), and rdzv_leave's ``leaving_run`` removes the node
   from the rendezvous; the survivors re-form while this node still runs;
3. the agent does NOT exit then: an exited container on Kubernetes is restarted (and would join again),
   and on EC2 and the local platform the instance is still there until its termination. It waits for
   the real termination signal, at most until the notice's termination time plus MARGIN_S (never more
   than MAX_WAIT_S after the notice), and then exits as torchrun does on SIGTERM (its
   ``SignalException``, exit status 1).

A signal that comes while the agent stops on the notice (the termination, early) is held until the
node left, so the workers' save and the leave are not cut short; a real signal that came first is
torch's as always (the notice then changes nothing). With no metadata endpoint (the variable unset and
EC2's address silent) the agent leaves on SIGTERM only, as rdzv_leave does, and says so once. Every line
it prints starts with rdzv_leave.PREFIX (stderr, the node's log).

torch internals relied on, besides rdzv_leave's (``check()``, called at start, refuses a torch that
lacks one, exit 2): ``multiprocessing.api._terminate_process_handler``, the handler torch registers
for its death signals by that module-level name when it starts workers (``PContext.start``); this
module puts a guard around it. This module imports nothing else of the toolkit but trainer modules.
"""
from __future__ import annotations

import calendar
import enum
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

from elastic_chaos.trainer import rdzv_leave
from elastic_chaos.trainer.rdzv_leave import PREFIX, MissingInternals, say, stamp
from elastic_chaos.trainer.spot_notice import ENDPOINT_VAR, Notice, SpotNoticeWatcher

POLL_S = 0.5
"""Seconds between two looks at the instance metadata (AWS suggests every 5 s for its 2-minute notice;
a loopback stand-in answers in a millisecond)."""

MARGIN_S = 30.0
"""Seconds past the notice's termination time the agent still waits for the termination signal."""

MAX_WAIT_S = 600.0
"""The most seconds after the notice the agent waits for it, whatever time the notice names (AWS: 120)."""

HANDLER_WAIT_S = 0.1
"""Seconds between two looks, before the first workers started, for torch's signal handler."""

NOTICE = "interruption"
"""The notice kind the agent acts on (a rebalance recommendation is only reported)."""


class Stop(enum.Enum):
    """What stops the agent, as its main thread's signal handler sees it."""

    NOTICE = "the interruption notice"
    SIGNAL = "a signal"


@dataclass
class State:
    """One agent's notice remedy: what stopped it, the notice, a signal held while it stopped."""

    stopped_by: Stop | None = None
    """Stop.NOTICE or Stop.SIGNAL once the handler raised (None: the agent was not stopped by either)."""
    sent: int = 0
    """SIGTERMs the notice thread sent the main thread that its handler has not taken yet (0 or 1)."""
    notice: Notice | None = None
    held: list[int] = field(default_factory=list)
    """Signals that came while the agent stopped on the notice (held, not raised), in order."""
    lock: threading.Lock = field(default_factory=threading.Lock)


def check() -> None:
    """rdzv_leave.check(), and the signal handler torch registers by name: MissingInternals otherwise."""
    rdzv_leave.check()
    from torch.distributed.elastic.multiprocessing import api as mp_api

    start = getattr(getattr(mp_api, "PContext", None), "start", None)
    names = getattr(getattr(start, "__code__", None), "co_names", ())
    if not (callable(getattr(mp_api, "_terminate_process_handler", None)) and "_terminate_process_handler" in names):
        import torch
        raise MissingInternals(
            f"torch {torch.__version__} lacks what leaving the rendezvous on the interruption notice relies on: "
            "torch.distributed.elastic.multiprocessing.api._terminate_process_handler, registered by name in "
            "PContext.start. Run with --leave-on-sigterm instead (the node then leaves on the termination), "
            "or use a torch that has it (tested on 2.13)")


def guarded(original: Callable[[int, FrameType | None], None], state: State) -> Callable[[int, FrameType | None], None]:
    """torch's death-signal handler (``original``, raises SignalException), except that once the agent
    stops on the notice a signal is held in ``state.held`` and not raised: the workers' save and the
    leave go on. Runs in the main thread."""

    def handle(signum: int, frame: FrameType | None) -> None:
        own = state.sent > 0   # (a real SIGTERM pending at the same time is taken with it: one call)
        if own:
            state.sent -= 1
        if state.stopped_by is Stop.NOTICE:
            state.held.append(signum)
            return
        if state.stopped_by is Stop.SIGNAL and own:
            return   # the notice's SIGTERM after a real signal's: torch already stops the agent
        if state.stopped_by is None:
            state.stopped_by = Stop.NOTICE if own else Stop.SIGNAL
        original(signum, frame)

    handle.guards_notice = True  # type: ignore[attr-defined]
    return handle


def install(state: State) -> None:
    """rdzv_leave.install(), and :func:`guarded` in place of torch's handler (torch registers it when its
    workers start). Idempotent."""
    rdzv_leave.install()
    from torch.distributed.elastic.multiprocessing import api as mp_api

    if not getattr(mp_api._terminate_process_handler, "guards_notice", False):
        setattr(mp_api, "_terminate_process_handler", guarded(mp_api._terminate_process_handler, state))  # noqa: B010


def terminate_at(notice: Notice) -> float | None:
    """The termination time the interruption notice names (its ``time``, ISO UTC), None if unreadable."""
    when = notice.detail.get("time")
    try:
        return float(calendar.timegm(time.strptime(str(when), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def wait_deadline(notice: Notice) -> float:
    """When the agent stops waiting for the termination signal after leaving (time.time())."""
    cap = notice.seen_at + MAX_WAIT_S
    named = terminate_at(notice)
    return cap if named is None else min(cap, max(named, notice.seen_at) + MARGIN_S)


def torch_handles_sigterm() -> bool:
    """Whether SIGTERM raises torch's SignalException now (torch registers its handler when it starts the
    first workers; before that SIGTERM would kill the agent outright)."""
    return bool(getattr(signal.getsignal(signal.SIGTERM), "guards_notice", False))


def on_notice(state: State, main_thread: int) -> Callable[[Notice], None]:
    """The watcher's callback (its thread): on the interruption notice, SIGTERM to the agent's main
    thread once torch handles it, unless a signal already stops the agent."""

    def act(notice: Notice) -> None:
        if notice.kind != NOTICE:
            say(f"{notice.kind} notice seen ({notice.detail}): the agent acts on the interruption notice only")
            return
        state.notice = notice
        deadline = wait_deadline(notice)
        while not torch_handles_sigterm() and state.stopped_by is None and time.time() < deadline:
            time.sleep(HANDLER_WAIT_S)   # the first workers are not started yet: torch's handler is not there
        with state.lock:
            if state.stopped_by is not None:
                say(f"interruption notice seen ({notice.detail}) while {state.stopped_by.value} already stops the "
                    "agent: it leaves as on SIGTERM")
                return
            if not torch_handles_sigterm():
                say(f"interruption notice seen ({notice.detail}) but torch's signal handler never came: "
                    "the agent leaves on SIGTERM only")
                return
            say(f"interruption notice seen ({notice.detail}): stopping the workers (SIGTERM) and leaving the "
                "rendezvous before the termination")
            state.sent += 1
            signal.pthread_kill(main_thread, signal.SIGTERM)

    return act


def watch(state: State, endpoint: str | None, main_thread: int) -> SpotNoticeWatcher:
    """Poll the instance metadata for the notice from a daemon thread (:func:`begin` there); returns the
    watcher at once (``stop()`` ends its polling)."""
    watcher = SpotNoticeWatcher(endpoint, interval_s=POLL_S, on_notice=on_notice(state, main_thread))
    threading.Thread(target=begin, args=(watcher, endpoint is not None), name="rdzv-notice", daemon=True).start()
    return watcher


def begin(watcher: SpotNoticeWatcher, configured: bool) -> bool:
    """Start ``watcher``'s polling and say where, unless no endpoint was ``configured`` and EC2's own
    address does not answer: then say once that the agent leaves on SIGTERM only. Blocks for that one
    look (at most the watcher's timeout); whether it polls."""
    if not configured and not watcher.reachable():
        say(f"no instance metadata (${ENDPOINT_VAR} unset, {watcher.endpoint} silent): --leave-on-notice "
            "leaves on SIGTERM only, as --leave-on-sigterm")
        return False
    say(f"watching {watcher.endpoint} for the interruption notice every {POLL_S:g} s")
    watcher.start()
    return True


def wait_for_termination(state: State, exc: BaseException) -> None:
    """After leaving on the notice: block until a death signal came (held by :func:`guarded`) or the
    deadline passed, saying which. Returns; the caller re-raises torch's SignalException."""
    assert state.notice is not None
    deadline = wait_deadline(state.notice)
    left = rdzv_leave.last_leave
    how = "left the rendezvous" if left else "could not leave the rendezvous"
    say(f"{how} on the interruption notice seen at {stamp(state.notice.seen_at)} "
        f"({time.time() - state.notice.seen_at:.3f} s ago); the workers are stopped; waiting for the "
        f"termination signal until {stamp(deadline)}")
    while not state.held and time.time() < deadline:
        time.sleep(0.1)
    if state.held:
        say(f"{signal.Signals(state.held[0]).name} came {time.time() - state.notice.seen_at:.3f} s after the "
            "notice was seen: exiting as torchrun does on it")
    else:
        say(f"no termination signal by {stamp(deadline)}: exiting as torchrun does on SIGTERM ({exc})")


def main(argv: list[str] | None = None, *, endpoint: str | None = None) -> None:
    """rdzv_leave.main's checks, then torchrun that leaves on the notice (``endpoint``: the metadata
    service, default ``$AWS_EC2_METADATA_SERVICE_ENDPOINT``)."""
    import os

    argv = sys.argv[1:] if argv is None else argv
    try:
        check()
        rdzv_leave.refuse_backend(argv)
    except MissingInternals as exc:
        print(f"{PREFIX} {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    state = State()
    install(state)
    watch(state, endpoint or os.environ.get(ENDPOINT_VAR) or None, threading.main_thread().ident or 0)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import main as torchrun

    try:
        torchrun(argv)
    except SignalException as exc:
        if state.stopped_by is Stop.NOTICE:
            wait_for_termination(state, exc)
        raise


if __name__ == "__main__":
    main()
