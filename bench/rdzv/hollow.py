"""A torchrun agent without workers: torch's own agent loop and rendezvous handler, in a thread.

:class:`HollowAgent` is torch's ``SimpleElasticAgent`` with the four hooks that touch worker
processes filled by stand-ins, so everything else is torch 2.13's own code, as torchrun runs it:
``run()`` and its monitor loop (every ``monitor_interval``: check the workers, then
``num_nodes_waiting()``, which syncs the rendezvous state at most once a second), ``_rendezvous``
(``next_rendezvous``: the exit and join operations over the backend, then the rank assignment
through the store), the keep-alive timer ``next_rendezvous`` starts, and the restart on a failed
worker group or on nodes waiting. Handlers are made as torch's registry makes them
(``create_backend`` + ``create_handler``), with counting wrappers around the backend and the store.

What stands in for the workers, and how a node is lost:

- ``fail``: the group's workers failed (a survivor's collective saw the dead peer): the next check
  returns FAILED and torch restarts the group (stop, rendezvous, start).
- ``kill``: the node is gone at once (a hard loss): its keep-alive timer is stopped and its loop
  ends; it never writes to the rendezvous again, as a SIGKILLed machine.
- ``sigterm``: the next check raises torch's ``SignalException(SIGTERM)``, as torchrun's signal
  handler does; ``run()`` takes its own signal path. With ``leave``, elastic_chaos.trainer.rdzv_leave's
  ``leave()`` (the remedy) then removes the node from the rendezvous; then the timer stops (the
  process would exit).
"""
from __future__ import annotations

import pickle
import signal
import threading
from collections import Counter
from collections.abc import Callable
from datetime import timezone
from typing import Any

from torch.distributed import Store  # type: ignore[attr-defined]
from torch.distributed.elastic.agent.server.api import (
    RunResult,
    SimpleElasticAgent,
    WorkerGroup,
    WorkerSpec,
    WorkerState,
)
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    DynamicRendezvousHandler,
    RendezvousBackend,
    create_handler,
)

from bench.rdzv import clock
from elastic_chaos.trainer import rdzv_leave

Emit = Callable[..., None]
ORDERS = ("fail", "kill", "sigterm")


class Counts:
    """Store operations and payload bytes, per kind of operation; shared by a process' agents."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ops: Counter[str] = Counter()
        self.sent = 0
        self.received = 0
        self._seen: set[Any] = set()

    def add(self, op: str, *, sent: int = 0, received: int = 0, n: int = 1) -> None:
        with self._lock:
            self.ops[op] += n
            self.sent += sent
            self.received += received

    def first(self, key: Any) -> bool:
        """True the first time ``key`` is offered in this process: one report of a thing many agents see."""
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
            return True

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"ops": dict(self.ops), "sent": self.sent, "received": self.received}


def _b64(n: int) -> int:
    return 4 * ((n + 2) // 3)


class CountingBackend(RendezvousBackend):
    """torch's backend, counting what each call moves: the state is base64 on the wire for both. On a
    lost compare-and-set, etcd-v2 reads the state again (a second request); c10d's compare_set returns it."""

    def __init__(self, inner: RendezvousBackend, counts: Counts) -> None:
        self._inner = inner
        self._counts = counts

    @property
    def name(self) -> str:
        return self._inner.name

    def get_state(self) -> Any:
        got = self._inner.get_state()
        self._counts.add("state_get", received=_b64(len(got[0])) if got else 0)
        return got

    def set_state(self, state: bytes, token: Any = None) -> Any:
        out = self._inner.set_state(state, token)
        back = _b64(len(out[0])) if out else 0
        sent = _b64(len(state)) + (len(token) if isinstance(token, bytes) else 0)  # c10d sends the old state
        if out is not None and not out[2]:
            self._counts.add("state_set_lost", sent=sent, received=back)
            if self._inner.name == "etcd-v2":
                self._counts.add("state_get", received=back)
        else:
            self._counts.add("state_set", sent=sent, received=back)
        return out


class CountingStore(Store):
    """The store handed to the rendezvous (torch's EtcdStore or TCPStore), counting operations and bytes:
    the rank assignment and MASTER_ADDR/PORT of every round go through it."""

    def __init__(self, inner: Store, counts: Counts) -> None:
        super().__init__()
        self._inner = inner
        self._counts = counts

    def set(self, key: str, value: Any) -> None:
        self._counts.add("store_set", sent=len(key) + len(value))
        self._inner.set(key, value)

    def get(self, key: str) -> bytes:
        value: bytes = self._inner.get(key)
        self._counts.add("store_get", sent=len(key), received=len(value))
        return value

    def multi_get(self, keys: list[str]) -> list[bytes]:
        values: list[bytes] = self._inner.multi_get(keys)
        self._counts.add("store_get", sent=sum(map(len, keys)), received=sum(map(len, values)), n=len(keys))
        return values

    def multi_set(self, keys: list[str], values: list[Any]) -> None:
        self._counts.add("store_set", sent=sum(map(len, keys)) + sum(map(len, values)), n=len(keys))
        self._inner.multi_set(keys, values)  # type: ignore[attr-defined]

    def add(self, key: str, amount: int) -> int:
        self._counts.add("store_add", sent=len(key))
        result: int = self._inner.add(key, amount)
        return result

    def wait(self, keys: list[str], *args: Any) -> None:
        self._counts.add("store_wait", sent=sum(map(len, keys)))
        self._inner.wait(keys, *args)

    def check(self, keys: list[str]) -> bool:
        self._counts.add("store_check", sent=sum(map(len, keys)))
        return bool(self._inner.check(keys))


def make_handler(params: RendezvousParameters, counts: Counts) -> DynamicRendezvousHandler:
    """A handler made as torch's registry makes it for etcd-v2 and c10d, the backend and store counted."""
    if params.backend == "etcd-v2":
        from torch.distributed.elastic.rendezvous.etcd_rendezvous_backend import create_backend
    elif params.backend == "c10d":
        from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend  # type: ignore[assignment]
    else:
        raise ValueError(f"rendezvous backend {params.backend!r}: etcd-v2 or c10d")
    backend, store = create_backend(params)
    return create_handler(CountingStore(store, counts), CountingBackend(backend, counts), params)


def node_addr(index: int) -> str:
    """Node ``index``'s rendezvous address, as a pod IP reads: the state holds one per node, so its size is
    realistic. :func:`node_index` reads it back."""
    return f"10.{index >> 16 & 255}.{index >> 8 & 255}.{index & 255}"


def node_index(addr: str) -> int:
    """The simulated node behind a rendezvous address made by :func:`node_addr`."""
    _, a, b, c = (int(x) for x in addr.split("."))
    return a << 16 | b << 8 | c


def state_summary(handler: DynamicRendezvousHandler) -> dict[str, Any]:
    """The rendezvous state as the store holds it now, in numbers: one read through torch's own backend (counted
    with the rest), unpickled as torch's state holder does. What a round that did not form looked like."""
    holder: Any = handler._state_holder
    got = holder._backend.get_state()
    if got is None:
        return {"participants": 0, "wait_list": 0, "round": None, "complete": False, "heartbeat_span_s": None}
    state = pickle.loads(got[0])
    beats = sorted(state.last_heartbeats.values())
    return {"participants": len(state.participants), "wait_list": len(state.wait_list), "round": state.round,
            "complete": bool(state.complete), "state_bytes": len(got[0]),
            "heartbeat_span_s": round((beats[-1] - beats[0]).total_seconds(), 2) if beats else None}


def report_declared_dead(handler: DynamicRendezvousHandler, index: int, counts: Counts, emit: Emit) -> None:
    """Report when this node's sync declares a *participant* dead -- of a completed round, or of one still
    forming: torch's ``_BackendRendezvousStateHolder._sanitize`` drops every node whose last heartbeat is
    older than keep_alive_interval x keep_alive_max_attempt. From a completed round, whose other nodes go on
    to exchange ranks with it; from a forming one, where a node whose heartbeat could not be written in time
    (its compare-and-sets queued behind everyone's at the store) is removed and must join again. Wraps
    ``_sanitize`` (torch's runs unchanged, its decisions untouched) and emits ``declared_dead`` once per round
    and node in this process (``forming``: the round had not completed): the evidence behind a round whose
    rank exchange times out, or one that never forms."""
    holder: Any = handler._state_holder
    original = holder._sanitize

    def sanitize() -> None:
        state = holder.state
        complete, rnd = state.complete, state.round
        heartbeats = dict(state.last_heartbeats)
        participants = set(state.participants)
        original()
        for node in holder._dead_nodes:
            if node in participants and counts.first((rnd, node.addr)):
                now = clock.current().now(timezone.utc)
                age = (now - heartbeats[node]).total_seconds() if node in heartbeats else None
                emit("declared_dead", index, round=rnd, node=node_index(node.addr), forming=not complete,
                     heartbeat_age_s=None if age is None else round(age, 2))

    holder._sanitize = sanitize


class Killed(Exception):
    """Ends a hollow agent's loop: the node is gone (hard loss)."""


class HollowAgent(SimpleElasticAgent):
    """torch's agent loop without worker processes (see the module docstring); one per simulated node."""

    def __init__(self, index: int, spec: WorkerSpec, emit: Emit) -> None:
        super().__init__(spec, exit_barrier_timeout=1)
        self.index = index
        self._emit = emit
        self._order: str | None = None
        self.leave = False
        """With ``sigterm``: leave the rendezvous (elastic_chaos.trainer.rdzv_leave) as the remedy does."""

    @property
    def handler(self) -> DynamicRendezvousHandler:
        handler = self.get_worker_group().spec.rdzv_handler
        assert isinstance(handler, DynamicRendezvousHandler)
        return handler

    def order(self, what: str, *, leave: bool = False) -> None:
        """Act at the next check of the workers (``kill`` stops the keep-alive now). Not blocking."""
        if what not in ORDERS:
            raise ValueError(f"order {what!r}: one of {ORDERS}")
        self.leave = leave
        if what == "kill":
            self.handler._stop_heartbeats()
        self._order = what

    def life(self) -> None:
        """The node's whole life: ``run()`` until it is lost or fails; reports how it ended. Blocks."""
        try:
            self.run()
            self._emit("ended", self.index, how="finished")
        except Killed:
            self._emit("ended", self.index, how="kill")
        except SignalException:
            self._emit("ended", self.index, how="leave" if self.leave else "sigterm")
        except Exception as exc:  # a rendezvous that timed out or closed, a store that went away
            self._emit("ended", self.index, how="error", error=f"{type(exc).__name__}: {exc}"[:300])
        finally:
            self.handler._stop_heartbeats()

    def run(self, role: str = "default") -> Any:
        """torch's run(); when it ends on SIGTERM and this node is to leave, elastic_chaos.trainer.rdzv_leave's
        ``leave()`` runs, as in the remedy's wrapper (``leaving_run``, tested on real jobs)."""
        try:
            return SimpleElasticAgent.run(self, role)
        except SignalException as exc:
            if self.leave and exc.sigval in rdzv_leave.LEAVE_ON:
                rdzv_leave.leave(self.handler)
            raise

    # -- torch's hooks -------------------------------------------------------
    def _rendezvous(self, worker_group: WorkerGroup) -> None:
        self._emit("rdzv_started", self.index)
        super()._rendezvous(worker_group)
        state = getattr(self.handler, "_state_holder", None)
        self._emit("formed", self.index, round=getattr(getattr(state, "state", None), "round", None),
                   rank=worker_group.group_rank, world=worker_group.group_world_size)

    def _start_workers(self, worker_group: WorkerGroup) -> dict[int, Any]:
        return {w.local_rank: None for w in worker_group.workers}

    def _stop_workers(self, worker_group: WorkerGroup, is_restart: bool = False) -> None:
        pass

    def _monitor_workers(self, worker_group: WorkerGroup) -> RunResult:
        order, self._order = self._order, None
        if order == "fail":
            return RunResult(state=WorkerState.FAILED)
        if order == "kill":
            raise Killed()
        if order == "sigterm":
            raise SignalException(f"Process {threading.get_ident()} got signal: {signal.SIGTERM}",
                                  sigval=signal.SIGTERM)
        return RunResult(state=WorkerState.HEALTHY)

    def _shutdown(self, death_sig: signal.Signals = signal.SIGTERM, timeout: int = 30) -> None:
        pass


def hollow_agent(index: int, params: RendezvousParameters, counts: Counts, emit: Emit, *,
                 monitor_interval: float) -> HollowAgent:
    """A node: its handler (connected to the backend now) and its agent, not started."""
    handler = make_handler(params, counts)
    report_declared_dead(handler, index, counts, emit)
    spec = WorkerSpec(role="default", local_world_size=1, rdzv_handler=handler,
                      entrypoint="hollow", max_restarts=1_000_000, monitor_interval=monitor_interval)
    return HollowAgent(index, spec, emit)


def sleep_until(t: float) -> None:
    """Until perceived wall time ``t`` (bench.rdzv.clock)."""
    clock.current().sleep_until(t)
