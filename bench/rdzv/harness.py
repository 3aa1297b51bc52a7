"""The rendezvous scale harness' plumbing: a store, a few processes of hollow agents, their events.

:class:`Harness` starts the rendezvous store the way the toolkit does -- a real etcd on 127.0.0.1
(:class:`~elastic_chaos.host.etcd.EtcdServer`) for etcd-v2, or torch's c10d TCPStore in a
process of its own (as the first agent would host it) -- then ``processes`` host processes
(:mod:`bench.rdzv.host`, each a :class:`~bench.rdzv.pipe.HostProcess`) that run the agents in threads,
node ``i`` in process ``i % processes``. Every process dies with this one (the kernel's death signal) and
is stopped by its PID.

The harness sends orders with a time to act at, reads every event into memory, and answers the
questions the episodes ask (:meth:`wait_world`: when did these nodes form a world of this size?).
CPU is read from /proc for the store and the host processes (:mod:`bench.rdzv.cpu`).
"""
from __future__ import annotations

import logging
import queue
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.rdzv import throttle
from bench.rdzv.clock import Dilation
from bench.rdzv.cpu import (
    BUSY_MACHINE,
    BUSY_PROCESS,
    RUN_DELAY,
    SAMPLE_S,
    machine_busy_s,
    proc_cpu_s,
    run_delay_s,
    threads_on_cpu_ns,
)
from bench.rdzv.pipe import HarnessError, HostProcess
from elastic_chaos.host.etcd import EtcdServer, free_port
from elastic_chaos.spec import RdzvBackend, RendezvousSpec

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class ScaleJob:
    """A simulated job: its size, its elastic range and rendezvous settings, and how it is hosted here."""

    backend: RdzvBackend
    nodes: int
    min_nodes: int
    max_nodes: int
    rdzv: RendezvousSpec = field(default_factory=RendezvousSpec)
    """The rendezvous knobs (a preset's); its backend is ignored for ``backend``."""
    monitor_interval: float = 0.1
    processes: int = 2
    """Host processes the agents are spread over (threads in each)."""
    torch_event_names: bool = False
    """Keep torch's ``inspect.stack()`` for every rendezvous event's name (bench.rdzv.host.cheap_event_names)."""
    dilation: float = 1.0
    """Time dilation (bench.rdzv.clock): every clock the agents read runs this many times slower, and the
    store is held to 1/dilation of one core (bench.rdzv.throttle). 1: real time, the store unthrottled."""

    def __post_init__(self) -> None:
        if not 1 <= self.min_nodes <= self.max_nodes or self.nodes < 1 or self.processes < 1:
            raise ValueError(f"a job of {self.nodes} nodes in {self.min_nodes}:{self.max_nodes} on "
                             f"{self.processes} processes cannot run")
        if not self.dilation >= 1.0:
            raise ValueError(f"time dilation {self.dilation!r}: it must be >= 1 (1 = real time)")


@dataclass(frozen=True)
class Formed:
    """Nodes forming a world of an expected size after a time: when the last of them had, how many
    rounds it took, and what went wrong on the way."""

    seconds: float | None
    """From ``since`` to the last node's rendezvous complete in that world; None: not within the timeout."""
    rounds: int
    """Distinct rendezvous rounds completed in the meantime (1: formed at once)."""
    errors: tuple[str, ...]
    missing: int
    """Nodes that had not formed that world when the wait ended (0 when it formed)."""


class Harness:
    """The store and the host processes of one simulated job; a context manager. Blocks in ``start``
    until every process answered (or raises HarnessError); ``stop`` is idempotent."""

    def __init__(self, job: ScaleJob, work_dir: Path, *, etcd_binary: str | None = None) -> None:
        self.job = job
        self.work_dir = work_dir
        self.run_id = f"scale-{uuid.uuid4().hex[:8]}"
        self._etcd_binary = etcd_binary
        self._etcd: EtcdServer | None = None
        self._store: HostProcess | None = None
        self._hosts: list[HostProcess] = []
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.events: list[dict[str, Any]] = []
        """Every event read so far, in arrival order."""
        self.samples: list[tuple[float, float, tuple[float, ...], tuple[float, ...]]] = []
        """(monotonic time, the machine's busy share since the last sample, each host's CPU s, each
        process' run delay s -- the store's first, unless throttled) every SAMPLE_S while started."""
        self._stop_sampling = threading.Event()
        self._sampler: threading.Thread | None = None
        self.clock = Dilation(job.dilation)
        """Perceived time, shared with the host processes (their epoch is this clock's): every time in an
        event, an order's ``at``, and the timeouts of wait_world and drain are perceived; CPU and the
        saturation samples are real."""
        self._quota: throttle.CpuQuota | None = None
        self.store_share: float | None = None
        """The share of one core the store was held to (1/dilation); None: not throttled. Kept after stop()."""
        self.unthrottled_why: str | None = None
        """Why a dilated store could not be throttled (its figures then flatter the store)."""

    def __enter__(self) -> Harness:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def store_pid(self) -> int | None:
        if self._etcd is not None:
            return self._etcd.pid
        return self._store.pid if self._store is not None else None

    @property
    def host_pids(self) -> list[int]:
        return [h.pid for h in self._hosts]

    def start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            endpoint = self._start_store()
            self._throttle_store()
            conf = ",".join(f"{k}={v}" for k, v in self.job.rdzv.conf().items())
            for i in range(self.job.processes):
                cmd = [sys.executable, "-m", "bench.rdzv.host", "agents", "--backend", self.job.backend.value,
                       "--endpoint", endpoint, "--run-id", self.run_id,
                       "--nodes", f"{self.job.min_nodes}:{self.job.max_nodes}", "--conf", conf,
                       "--monitor-interval", str(self.job.monitor_interval),
                       "--dilation", repr(self.clock.factor), "--epoch", repr(self.clock.epoch),
                       *(["--torch-event-names"] if self.job.torch_event_names else [])]
                self._hosts.append(HostProcess(cmd, self.work_dir / f"host-{i}.log", self._events))
            self._expect("ready", len(self._hosts), timeout_s=120)
            self._sampler = threading.Thread(target=self._sample, name="scale-cpu-sampler", daemon=True)
            self._sampler.start()
        except BaseException:
            self.stop()
            raise

    def _start_store(self) -> str:
        if self.job.backend is RdzvBackend.ETCD_V2:
            self._etcd = EtcdServer(self.work_dir / "etcd-data", binary=Path(self._etcd_binary)
                                    if self._etcd_binary else None)
            self._etcd.start()
            return self._etcd.endpoint
        endpoint = f"127.0.0.1:{free_port()}"
        ready: queue.Queue[dict[str, Any]] = queue.Queue()
        self._store = HostProcess([sys.executable, "-m", "bench.rdzv.host", "store", "--endpoint", endpoint,
                                "--run-id", self.run_id], self.work_dir / "store.log", ready)
        try:
            event = ready.get(timeout=60)
        except queue.Empty:
            raise HarnessError(f"the c10d store did not start within 60 s; its log: {self._store.log_path}") from None
        if event["ev"] != "ready":
            raise HarnessError(f"the c10d store exited at start; its log: {self._store.log_path}")
        return endpoint

    def _throttle_store(self) -> None:
        if self.clock.factor == 1.0:
            return
        self.unthrottled_why = throttle.available()
        if self.unthrottled_why is not None:
            log.warning("the store runs unthrottled under time dilation %s: %s", self.clock.factor,
                        self.unthrottled_why)
            return
        self._quota = throttle.CpuQuota(self.clock.factor, tag=self.run_id)
        assert self.store_pid is not None
        self._quota.add(self.store_pid)
        self.store_share = self._quota.share

    def store_throttled_s(self) -> float:
        """Real seconds so far the store wanted a CPU beyond its quota: the store, not this machine, was the limit."""
        return self._quota.throttled_s() if self._quota is not None else 0.0

    def _sample(self) -> None:
        busy, total = machine_busy_s()
        while not self._stop_sampling.wait(SAMPLE_S):
            busy1, total1 = machine_busy_s()
            share = (busy1 - busy) / (total1 - total) if total1 > total else 0.0
            busy, total = busy1, total1
            pids = [p for p in self._delay_pids() if p]
            self.samples.append((time.monotonic(), share, tuple(proc_cpu_s(p) for p in self.host_pids),
                                 tuple(run_delay_s(p) for p in pids)))

    def _delay_pids(self) -> list[int | None]:
        """Whose run delay says this machine was the limit. A throttled store waits for its quota, not for this
        machine. Under time dilation, host processes' waits are left to BUSY_MACHINE: their threads' waits
        summed (hundreds of agents woken together by one store reply) are real milliseconds, 1/dilation of
        that in the time torch perceives, while the cores may be mostly idle."""
        store = None if self._quota is not None else self.store_pid
        return [store, *(self.host_pids if self.clock.factor == 1.0 else [])]

    def saturated_s(self, since: float, until: float) -> float:
        """Seconds between monotonic ``since`` and ``until`` during which this machine was the limit: its
        cores were more than BUSY_MACHINE busy (with this work or anyone's), or a process of the harness
        (in real time only, see _delay_pids) or an unthrottled store waited for a CPU more than RUN_DELAY of
        the time, or one host process used more than BUSY_PROCESS of a core (its agents' threads share one
        interpreter lock)."""
        out = 0.0
        pts = [x for x in self.samples if since - SAMPLE_S <= x[0] <= until + SAMPLE_S]
        for (t0, _, h0, d0), (t1, share, h1, d1) in zip(pts, pts[1:], strict=False):
            dt = t1 - t0
            if dt <= 0 or len(h0) != len(h1) or len(d0) != len(d1):
                continue
            cpu = max(((b - a) / dt for a, b in zip(h0, h1, strict=True)), default=0.0)
            delay = max(((b - a) / dt for a, b in zip(d0, d1, strict=True)), default=0.0)
            if cpu > BUSY_PROCESS or delay > RUN_DELAY or share > BUSY_MACHINE:
                out += dt
        return round(out, 2)

    def stop(self) -> None:
        """Stop the host processes, then the store, by PID. Idempotent."""
        self._stop_sampling.set()
        hosts, self._hosts = self._hosts, []
        for h in hosts:
            h.stop()
        if self._store is not None:
            self._store.stop()
            self._store = None
        if self._etcd is not None:
            self._etcd.stop()
            self._etcd = None
        if self._quota is not None:
            self._quota.remove()
            self._quota = None

    # -- orders --------------------------------------------------------------
    def _by_host(self, ids: Iterable[int]) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for i in ids:
            out.setdefault(i % len(self._hosts), []).append(i)
        return out

    def spawn(self, ids: list[int], timeout_s: float = 600.0) -> None:
        """Make nodes ``ids`` (handlers connected to the store), not started. Blocks until every host said so."""
        parts = self._by_host(ids)
        for h, part in parts.items():
            self._hosts[h].send({"cmd": "spawn", "ids": part})
        self._expect("spawned", len(parts), timeout_s=timeout_s)

    def run_nodes(self, ids: list[int], at: float) -> None:
        """Nodes ``ids`` run from time ``at``. Not blocking."""
        for h, part in self._by_host(ids).items():
            self._hosts[h].send({"cmd": "start", "ids": part, "at": at})

    def order(self, ids: list[int], what: str, at: float, *, leave: bool = False) -> None:
        """``fail``, ``kill`` or ``sigterm`` (``leave``: the remedy) for nodes ``ids`` at time ``at``. Not blocking."""
        for h, part in self._by_host(ids).items():
            self._hosts[h].send({"cmd": "order", "ids": part, "order": what, "at": at, "leave": leave})

    def counts(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """The store operations and payload bytes of every host, summed."""
        for h in self._hosts:
            h.send({"cmd": "stats"})
        total: dict[str, Any] = {"ops": {}, "sent": 0, "received": 0}
        for event in self._expect("stats", len(self._hosts), timeout_s=timeout_s):
            c = event["counts"]
            for op, n in c["ops"].items():
                total["ops"][op] = total["ops"].get(op, 0) + n
            total["sent"] += c["sent"]
            total["received"] += c["received"]
        return total

    def peek(self, timeout_s: float = 120.0) -> dict[str, Any] | None:
        """The rendezvous state as the store holds it now, in numbers (hollow.state_summary; read by the first host
        process); None when that host has no agent. Blocks (the store may be busy: a storm queues the read)."""
        self._hosts[0].send({"cmd": "peek"})
        state: dict[str, Any] | None = self._expect("peek", 1, timeout_s=timeout_s)[0]["state"]
        return state

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far: ``store`` (etcd, or the c10d store process) and ``agents`` (the host processes)."""
        store = self.store_pid
        return {"store": proc_cpu_s(store) if store else 0.0,
                "agents": sum(proc_cpu_s(p) for p in self.host_pids)}

    def threads_on_cpu(self) -> dict[str, dict[tuple[int, int], int]]:
        """Per-thread on-CPU nanoseconds of ``store`` and ``agents``, for a window too short for cpu()'s ticks."""
        return {"store": threads_on_cpu_ns([self.store_pid] if self.store_pid else []),
                "agents": threads_on_cpu_ns(self.host_pids)}

    # -- events --------------------------------------------------------------
    def _next(self, timeout_s: float) -> dict[str, Any] | None:
        try:
            event = self._events.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            return None
        self.events.append(event)
        if event["ev"] in ("fatal", "exited"):
            raise HarnessError(f"host process {event['pid']} {event['ev']}: {event.get('error', '')}; logs in "
                               f"{self.work_dir}")
        return event

    def _expect(self, ev: str, n: int, timeout_s: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        got: list[dict[str, Any]] = []
        while len(got) < n:
            event = self._next(deadline - time.monotonic())
            if event is None:
                raise HarnessError(f"{n - len(got)} of {n} host processes did not answer {ev!r} within "
                                   f"{timeout_s:.0f} s; logs in {self.work_dir}")
            if event["ev"] == ev:
                got.append(event)
        return got

    def wait_world(self, ids: list[int], world: int, since: float, timeout_s: float) -> Formed:
        """Block until every node of ``ids`` completed a rendezvous of the same round into a world of
        ``world`` nodes after ``since``, or ``timeout_s`` passed (seconds then None); perceived times."""
        want = set(ids)
        last: dict[int, dict[str, Any]] = {}
        rounds: set[Any] = set()
        errors: list[str] = []
        deadline = time.monotonic() + self.clock.real_s(timeout_s)
        pending = [e for e in self.events if e["ev"] in ("formed", "ended")]  # read while waiting for others
        while True:
            done = [last.get(i) for i in want]
            if all(e is not None and e["world"] == world for e in done) and \
                    len({e["round"] for e in done if e is not None}) == 1:
                t = max(e["t"] for e in done if e is not None)
                return Formed(round(t - since, 3), len(rounds), tuple(errors), 0)
            event = pending.pop(0) if pending else self._next(deadline - time.monotonic())
            if event is None:
                missing = sum(1 for e in done if e is None or e["world"] != world)
                return Formed(None, len(rounds), tuple(errors), missing)
            if event["ev"] == "formed" and event["t"] >= since:
                rounds.add(event["round"])
                if event["id"] in want:
                    last[event["id"]] = event
            elif event["ev"] == "ended" and event.get("how") == "error" and event["t"] >= since:
                errors.append(f"node {event['id']}: {event.get('error')}")

    def declared_dead(self, since: float) -> list[dict[str, Any]]:
        """Participants (of a completed round, or of one forming) that a node's sync declared dead after ``since``
        (bench.rdzv.hollow.report_declared_dead), once per round and node over every host process; what has
        arrived so far."""
        while self._next(0.0) is not None:
            pass
        seen: dict[tuple[Any, Any], dict[str, Any]] = {}
        for e in self.events:
            if e["ev"] == "declared_dead" and e["t"] >= since:
                seen.setdefault((e["round"], e["node"]), e)
        return list(seen.values())

    def false_deaths(self, since: float, gone: set[int]) -> list[dict[str, Any]]:
        """Of :meth:`declared_dead`, the live nodes it cost their round: not stopped by the harness (``gone``)
        and never completing the round they were dropped from. A declaration is one node's sync reading an
        expired heartbeat; it bites only if that node then writes its state, and a node that started its next
        rendezvous had stopped its own heartbeats on purpose (``next_rendezvous`` does so first), after it
        formed that round. A node that formed the round anyway lost nothing to it."""
        dead = [d for d in self.declared_dead(since) if d["node"] not in gone]
        formed = {(e["id"], e["round"]) for e in self.events if e["ev"] == "formed"}
        return [d for d in dead if (d["node"], d["round"]) not in formed]

    def drain(self, seconds: float) -> list[dict[str, Any]]:
        """The events of the next ``seconds`` of perceived time (blocks that long)."""
        out = []
        deadline = time.monotonic() + self.clock.real_s(seconds)
        while (event := self._next(deadline - time.monotonic())) is not None:
            out.append(event)
        return out
