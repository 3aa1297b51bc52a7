"""torchrun whose agent leaves the rendezvous on SIGTERM, so the survivors need not wait out its keep-alive.

    python -m elastic_chaos.trainer.rdzv_leave [torchrun's arguments]    # instead of python -m torch.distributed.run

Why: torch 2.13's agent, on SIGTERM (what a spot interruption's shutdown and a pod deletion
deliver), stops its workers and exits without removing itself from the rendezvous
(``launch_agent`` skips ``rdzv_handler.shutdown()`` on a signal, since that would close the
rendezvous for every node). The node stays a participant of the completed round until the
survivors see its heartbeat ``keep_alive_interval x keep_alive_max_attempt`` old; only then can
they form a smaller world (and wait ``last_call_timeout`` more).

What this changes, and nothing else: when ``SimpleElasticAgent.run`` ends with torch's
``SignalException`` for SIGTERM -- by then the agent has sent its workers SIGTERM and waited for
them to exit (the reference trainer saves a checkpoint in that time; torch kills what is left
after its shutdown timeout) -- the node runs the dynamic rendezvous' own exit operation, the one
``next_rendezvous`` runs before every join: it removes the node from the participants (and its
heartbeat) with the backend's compare-and-set. Once the survivors' own exit operations have run,
nobody is left in the completed round and the next round starts at once. The signal is then
re-raised: torchrun exits as it would have.

torch internals relied on (``check()``, called at start, refuses a torch that lacks one, exit 2):

- ``dynamic_rendezvous._RendezvousExitOp`` (the exit operation's state handler);
- ``DynamicRendezvousHandler._op_executor`` (runs it over the backend), ``._heartbeat_lock`` (held
  as its own keep-alive holds it), ``._stop_heartbeats()`` (its keep-alive timer), ``._settings``
  (its timeouts: the operation is bounded by the close timeout), ``._get_deadline()``;
- ``SimpleElasticAgent.run`` raising ``SignalException`` after its workers were stopped.

Only the dynamic rendezvous (``--rdzv-backend etcd-v2`` or ``c10d``) has the exit operation:
another backend is refused at start (exit 2). This module imports nothing else of the toolkit.
elastic_chaos.trainer.rdzv_notice (``--leave-on-notice``) builds on it: the same stop and leave, on the
spot interruption notice, before the termination.
"""
from __future__ import annotations

import functools
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

LEAVE_ON = (signal.SIGTERM,)
"""The death signals on which the node leaves: what a spot interruption's shutdown and a pod deletion send."""

BACKENDS = ("etcd-v2", "c10d")
"""torchrun's rendezvous backends that use the dynamic rendezvous (and so have the exit operation)."""

last_leave: bool | None = None
"""Whether this process' last :func:`leave` took (None: none ran); elastic_chaos.trainer.rdzv_notice reads it."""

PREFIX = "elastic-chaos rdzv_leave:"
"""Every line this module prints starts with it (a node log is searched for it)."""

HANDLER_ATTRIBUTES = ("_op_executor", "_heartbeat_lock", "_settings")
HANDLER_METHODS = ("_stop_heartbeats", "_get_deadline")


class MissingInternals(RuntimeError):
    """The installed torch lacks an internal this remedy relies on."""


def check() -> None:
    """Raise MissingInternals naming each torch internal this module relies on that is missing."""
    from torch.distributed.elastic.agent.server import api as agent_api
    from torch.distributed.elastic.multiprocessing import api as mp_api
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

    missing = []
    if not callable(getattr(dr, "_RendezvousExitOp", None)):
        missing.append("torch.distributed.elastic.rendezvous.dynamic_rendezvous._RendezvousExitOp")
    handler = getattr(dr, "DynamicRendezvousHandler", None)
    declared = getattr(handler, "__annotations__", {})
    missing += [f"DynamicRendezvousHandler.{a}" for a in HANDLER_ATTRIBUTES if a not in declared]
    missing += [f"DynamicRendezvousHandler.{m}()" for m in HANDLER_METHODS if not callable(getattr(handler, m, None))]
    if not callable(getattr(getattr(agent_api, "SimpleElasticAgent", None), "run", None)):
        missing.append("torch.distributed.elastic.agent.server.api.SimpleElasticAgent.run")
    if not isinstance(getattr(mp_api, "SignalException", None), type):
        missing.append("torch.distributed.elastic.multiprocessing.api.SignalException")
    if missing:
        import torch
        raise MissingInternals(
            f"torch {torch.__version__} lacks what leaving the rendezvous on SIGTERM relies on: "
            f"{', '.join(missing)}. Run without --leave-on-sigterm and --leave-on-notice (survivors then wait for "
            "the node's keep-alive to expire), or use a torch that has them (tested on 2.13)")


def leave(handler: Any) -> bool:
    """Remove this node from the rendezvous' participants, now; blocks until the backend took the
    change (a compare-and-set, retried on a stale state) or the handler's close timeout passed.

    Stops the node's keep-alive first. Returns False, without raising, for a handler that is not the
    dynamic rendezvous (nothing to leave) or when the backend failed; a node that is no participant
    (waiting for a round) is left alone. Idempotent."""
    global last_leave
    last_leave = _leave(handler)
    return last_leave


def _leave(handler: Any) -> bool:
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

    if not isinstance(handler, dr.DynamicRendezvousHandler):
        say(f"{type(handler).__name__} is not the dynamic rendezvous: nothing to leave")
        return False
    began = time.monotonic()
    handler._stop_heartbeats()
    try:
        with handler._heartbeat_lock:
            deadline = handler._get_deadline(handler._settings.timeout.close)
            handler._op_executor.run(dr._RendezvousExitOp(), deadline)
    except Exception as exc:  # the store may be gone with the cluster: the keep-alive expiry still works
        say(f"could not leave the rendezvous {handler.get_run_id()!r}: {type(exc).__name__}: {exc}")
        return False
    say(f"left the rendezvous {handler.get_run_id()!r} in {time.monotonic() - began:.3f} s")
    return True


def leaving_run(run: Callable[..., Any]) -> Callable[..., Any]:
    """``SimpleElasticAgent.run`` that, when it ends with a SignalException for one of LEAVE_ON,
    leaves the rendezvous (:func:`leave`) before re-raising it."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    @functools.wraps(run)
    def run_then_leave(agent: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return run(agent, *args, **kwargs)
        except SignalException as exc:
            if exc.sigval in LEAVE_ON:
                leave(agent.get_worker_group().spec.rdzv_handler)
            raise

    run_then_leave.leaves_rendezvous = True  # type: ignore[attr-defined]
    return run_then_leave


def install() -> None:
    """Patch ``SimpleElasticAgent.run`` with :func:`leaving_run`. Idempotent; check() first."""
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent

    if not getattr(SimpleElasticAgent.run, "leaves_rendezvous", False):
        SimpleElasticAgent.run = leaving_run(SimpleElasticAgent.run)  # type: ignore[method-assign]


def rdzv_backend(argv: list[str]) -> str:
    """The rendezvous backend torchrun would use for ``argv`` (its own parser; --standalone is c10d)."""
    from torch.distributed.run import parse_args

    args = parse_args(argv)  # type: ignore[no-untyped-call]
    return "c10d" if args.standalone else str(args.rdzv_backend)


def refuse_backend(argv: list[str]) -> None:
    """MissingInternals when torchrun's ``argv`` names a backend without the dynamic rendezvous."""
    backend = rdzv_backend(argv)
    if backend not in BACKENDS:
        raise MissingInternals(f"--rdzv-backend {backend}: only the dynamic rendezvous "
                               f"({' or '.join(BACKENDS)}) can be left; use one of them or torchrun itself")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    try:
        check()
        refuse_backend(argv)
    except MissingInternals as exc:
        print(f"{PREFIX} {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    install()
    from torch.distributed.run import main as torchrun

    torchrun(argv)


def say(text: str) -> None:
    """Print ``text`` to stderr after PREFIX, with the time (UTC, ms), flushed."""
    print(f"{PREFIX} {text} (at {stamp(time.time())})", file=sys.stderr, flush=True)


def stamp(t: float) -> str:
    """``t`` (time.time()) as the lines of this module and rdzv_notice say it: HH:MM:SS.mmm UTC."""
    return time.strftime("%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d} UTC"


if __name__ == "__main__":
    main()
