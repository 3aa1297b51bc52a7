"""What one c10d rendezvous store operation costs, measured on this machine: the store model's calibration.

The store model (elastic_chaos/scale/store_model.py) derives the c10d store's load from torch's protocol; the
three costs it needs are measured here with torch's own code, not fitted to the harness' rows:

- the state's size: torch's ``_RendezvousState`` with N participants (each in ``participants`` and
  ``last_heartbeats``, addresses as the harness' pod IPs, bench/rdzv/hollow.node_addr), pickled as
  ``_BackendRendezvousStateHolder.sync`` does and base64-encoded as ``C10dRendezvousBackend`` sends it;
- a client's CPU per attempt of a read-modify-write: what a node does between the store's reply to one
  compare-and-set and its next one when it lost -- ``b64decode`` + ``pickle.loads`` + torch's ``_sanitize``
  (the reply), then ``pickle.dumps`` + ``b64encode`` (the next attempt) -- timed on this thread's CPU clock;
- the store's CPU per operation: torch's TCPStore hosted as the harness hosts it (``python -m
  bench.rdzv.host store``, the first agent's store), one client sending ``get`` and ``compare_set`` of a
  state of N participants, read from the store process' threads (schedstat, ns); and the same under the
  harness' time-dilation quota (bench/rdzv/throttle.py: 1/d of one core), to see what the quota itself costs.

CPU clocks, not wall clocks, so a machine loaded by other work changes these little; the load is recorded.
``python -m bench --store-model`` runs it (bench/store_model.py) and writes ``elastic_chaos/scale/store_costs.json``.
"""
from __future__ import annotations

import json
import os
import pickle
import queue
import statistics
import subprocess
import sys
import threading
import time
from base64 import b64decode, b64encode
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

from bench.rdzv import throttle
from bench.rdzv.cpu import on_cpu_between_s, threads_on_cpu_ns
from bench.rdzv.hollow import node_addr

SIZES = (8, 64, 128, 256, 512, 1024, 2048, 4096)
"""Participants in the state whose costs are measured: the harness' sizes and the ones the model predicts."""
QUOTA_SIZES = (128, 512, 1024)
"""Sizes also measured with the store under the harness' quota (slow: the store runs 1 ms in every d ms)."""
KEY = "torch.rendezvous.store-bench"


def rendezvous_state(n: int) -> Any:
    """torch's ``_RendezvousState`` holding ``n`` participants as a formed round does: each in
    ``participants`` (with its rank) and ``last_heartbeats``; the same node object in both, as torch's nodes
    write their own ``_NodeDesc``, and a datetime of its own per heartbeat (each node writes ``datetime.now``:
    one shared object would be pickled once and understate the state by a third)."""
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc, _RendezvousState

    state = _RendezvousState()
    now = datetime.now(timezone.utc)
    for i in range(n):
        node = _NodeDesc(node_addr(i), 100_000 + i, 0)
        state.participants[node] = i
        state.last_heartbeats[node] = now + timedelta(microseconds=i)
    state.complete = True
    return state


def state_bytes(n: int) -> tuple[int, int]:
    """(pickled, base64) bytes of the state with ``n`` participants: what the store holds and moves."""
    raw = pickle.dumps(rendezvous_state(n))
    return len(raw), len(b64encode(raw))


def _holder(n: int) -> Any:
    """torch's state holder with the state of ``n`` participants, settings under which nobody is expired."""
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
        RendezvousSettings,
        RendezvousTimeout,
        _BackendRendezvousStateHolder,
    )

    settings = RendezvousSettings("store-bench", n, n, RendezvousTimeout(), timedelta(hours=1), 3)
    holder = _BackendRendezvousStateHolder(None, settings)  # type: ignore[arg-type]
    return holder


def client_attempt_cpu_s(n: int, min_s: float = 0.3) -> float:
    """This thread's CPU seconds for one retry of a lost compare-and-set at ``n`` participants: decode,
    unpickle and sanitize the state the store returned, then pickle and encode the next attempt."""
    holder = _holder(n)
    wire = b64encode(pickle.dumps(rendezvous_state(n)))
    reps, spent = 0, 0.0
    began = time.thread_time()
    while spent < min_s or reps < 3:
        holder._state = pickle.loads(b64decode(wire))
        holder._sanitize()
        b64encode(pickle.dumps(holder._state)).decode()
        reps += 1
        spent = time.thread_time() - began
    return spent / reps


@contextmanager
def hosted_store(dilation: float | None = None) -> Iterator[tuple[int, Any]]:
    """torch's TCPStore hosted as the harness hosts it (its own process), and one client: (store pid, client).
    ``dilation``: the store held to 1/dilation of one core as under the harness' time dilation."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    from elastic_chaos.host.etcd import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.rdzv.host", "store", "--endpoint", f"127.0.0.1:{port}",
                             "--run-id", "store-bench"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    quota = None
    try:
        ready = _first_line(proc, 60.0)
        if json.loads(ready).get("ev") != "ready":
            raise RuntimeError(f"the store did not start: {ready!r}")
        if dilation is not None:
            quota = throttle.CpuQuota(dilation, tag="store-bench")
            quota.add(proc.pid)
        yield proc.pid, TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=120))
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if quota is not None:
            quota.remove()


def _first_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    out = proc.stdout
    threading.Thread(target=lambda: lines.put(out.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout_s)
    except queue.Empty:
        raise RuntimeError(f"the store did not start within {timeout_s} s") from None


def _store_cpu_per_op(pid: int, op: Callable[[], object], reps: int) -> float:
    before = threads_on_cpu_ns([pid])
    for _ in range(reps):
        op()
    time.sleep(0.05)  # the last reply is sent before the store's thread is off the CPU
    return on_cpu_between_s(before, threads_on_cpu_ns([pid])) / reps


def store_cpu(pid: int, client: Any, n: int, reps: int) -> dict[str, float]:
    """The store's CPU seconds per ``get``, won ``compare_set`` and lost ``compare_set`` of the state of ``n``
    participants (base64, as torch's backend sends it)."""
    a = b64encode(pickle.dumps(rendezvous_state(n)))
    b = b64encode(pickle.dumps(rendezvous_state(n)))  # its heartbeats a moment later: another value, same size
    client.set(KEY, a)
    flip = [a, b]

    def won() -> None:
        client.compare_set(KEY, flip[0], flip[1])
        flip.reverse()

    return {"get": _store_cpu_per_op(pid, lambda: client.get(KEY), reps),
            "cas_won": _store_cpu_per_op(pid, won, reps),
            "cas_lost": _store_cpu_per_op(pid, lambda: client.compare_set(KEY, b"stale" + a[5:], a), reps)}


def reps_for(n: int, dilation: float | None) -> int:
    """Enough operations for the store's CPU to be read well above schedstat's noise, few under a quota."""
    base = max(200, 200_000 // max(n, 1))
    return max(40, base // 8) if dilation else base


def measure(sizes: Sequence[int] = SIZES, quota_sizes: Sequence[int] = QUOTA_SIZES,
            dilations: Sequence[float] = (8.0, 64.0), repeats: int = 3,
            say: Callable[[str], None] = print) -> dict[str, Any]:
    """Every cost above, ``repeats`` times each (their median kept, every repetition recorded), with the load
    before and after. Blocks for about a minute; starts and stops its own store processes."""
    load = [os.getloadavg()[0]]
    out: dict[str, Any] = {"state": {}, "client": {}, "store": {}, "store_quota": {}}
    for n in sizes:
        out["state"][str(n)] = dict(zip(("pickle", "b64"), state_bytes(n), strict=True))
        runs = [client_attempt_cpu_s(n) for _ in range(repeats)]
        out["client"][str(n)] = {"median": statistics.median(runs), "runs": runs}
    say(f"store model: state sizes and client CPU measured for {list(sizes)}")
    for _ in range(repeats):
        with hosted_store() as (pid, client):
            for n in sizes:
                got = store_cpu(pid, client, n, reps_for(n, None))
                for op, s in got.items():
                    out["store"].setdefault(str(n), {}).setdefault(op, []).append(s)
    say("store model: the store's CPU per operation measured, unthrottled")
    if throttle.available() is None:
        for d in dilations:
            with hosted_store(d) as (pid, client):
                for n in quota_sizes:
                    got = store_cpu(pid, client, n, reps_for(n, d))
                    out["store_quota"].setdefault(f"{d:g}", {})[str(n)] = got
        say(f"store model: the store's CPU per operation under the harness' quota (x{', x'.join(map(str, dilations))})")
    else:
        out["store_quota_skipped"] = throttle.available()
    load.append(os.getloadavg()[0])
    out["load_avg"] = load
    out["cores"] = os.cpu_count()
    return out


if __name__ == "__main__":
    json.dump(measure(), sys.stdout, indent=1)
