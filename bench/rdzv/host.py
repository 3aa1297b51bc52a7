"""One process of the rendezvous scale harness: many hollow agents in threads, or the c10d store.

    python -m bench.rdzv.host agents --backend etcd-v2 --endpoint 127.0.0.1:2379 --run-id R --nodes 9:10
    python -m bench.rdzv.host store --endpoint 127.0.0.1:29400 --run-id R

The harness (:mod:`bench.rdzv.harness`) drives it over stdin and reads what happened on stdout,
one JSON object per line each way. Commands: ``spawn`` (make agents ``ids``: handlers connected,
not started), ``start`` (run them from time ``at``), ``order`` (``fail``/``kill``/``sigterm`` at
``at``; ``leave`` with sigterm), ``stats`` (the store counters), ``peek`` (the rendezvous state, in numbers),
``exit``. Events: ``spawned``,
``rdzv_started``, ``formed``, ``ended``, ``stats``, ``ready``, ``fatal``. Times are perceived wall
times (bench.rdzv.clock: ``time.time()`` itself unless ``--dilation`` slows every clock of the process;
one machine, one epoch, one clock). The ``store`` role hosts torch's c10d TCPStore as the first agent would,
so its CPU is the store's.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from typing import Any, TextIO

from bench.rdzv import clock

RUN_AGENT_STACK = 512 * 1024
"""Thread stack size: a thousand agent and keep-alive threads in one process stay small."""


class Host:
    """The agents of one process and the line protocol around them."""

    def __init__(self, args: argparse.Namespace, out: TextIO) -> None:
        from bench.rdzv.hollow import Counts

        self.args = args
        self.out = out
        self.counts = Counts()
        self.agents: dict[int, Any] = {}
        self._lock = threading.Lock()

    def emit(self, ev: str, index: int | None = None, **data: Any) -> None:
        line = json.dumps({"ev": ev, "id": index, "t": clock.current().time(), **data})
        with self._lock:
            self.out.write(line + "\n")
            self.out.flush()

    def params(self, index: int) -> Any:
        from torch.distributed.elastic.rendezvous import RendezvousParameters

        from bench.rdzv.hollow import node_addr

        lo, _, hi = self.args.nodes.partition(":")
        conf = dict(kv.split("=", 1) for kv in self.args.conf.split(",") if kv)
        if self.args.backend == "c10d":
            conf["is_host"] = "0"  # the store lives in the store process
        return RendezvousParameters(backend=self.args.backend, endpoint=self.args.endpoint, run_id=self.args.run_id,
                                    min_nodes=int(lo), max_nodes=int(hi or lo), local_addr=node_addr(index), **conf)

    def spawn(self, ids: list[int]) -> None:
        from bench.rdzv.hollow import hollow_agent

        for i in ids:
            self.agents[i] = hollow_agent(i, self.params(i), self.counts, self.emit,
                                          monitor_interval=self.args.monitor_interval)
        self.emit("spawned", ids=ids)

    def start(self, ids: list[int], at: float) -> None:
        from bench.rdzv.hollow import sleep_until

        def life(agent: Any) -> None:
            sleep_until(at)
            agent.life()

        for i in ids:
            threading.Thread(target=life, args=(self.agents[i],), name=f"hollow-{i}", daemon=True).start()

    def order(self, ids: list[int], what: str, at: float, leave: bool) -> None:
        from bench.rdzv.hollow import sleep_until

        def act() -> None:
            sleep_until(at)
            for i in ids:
                self.agents[i].order(what, leave=leave)
            self.emit("ordered", ids=ids, order=what)

        threading.Thread(target=act, name=f"order-{what}", daemon=True).start()

    def handle(self, cmd: dict[str, Any]) -> bool:
        """One command; False for ``exit``."""
        what = cmd["cmd"]
        if what == "spawn":
            self.spawn(cmd["ids"])
        elif what == "start":
            self.start(cmd["ids"], cmd["at"])
        elif what == "order":
            self.order(cmd["ids"], cmd["order"], cmd["at"], bool(cmd.get("leave")))
        elif what == "stats":
            self.emit("stats", counts=self.counts.snapshot(), agents=len(self.agents))
        elif what == "peek":  # any agent's handler reads the one shared state
            from bench.rdzv.hollow import state_summary

            agent = next(iter(self.agents.values()), None)
            self.emit("peek", state=None if agent is None else state_summary(agent.handler))
        elif what == "exit":
            return False
        else:
            self.emit("fatal", error=f"unknown command {what!r}")
        return True


def cheap_event_names() -> None:
    """torch names every rendezvous event after its caller with ``inspect.stack()`` -- evaluated for each
    operation even when no event handler is configured (milliseconds each: the whole stack's source lines
    are read). Here a constant name stands in: it changes no rendezvous decision, and lets one machine
    host many more agents. ``--torch-event-names`` keeps torch's own."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    dynamic_rendezvous.get_method_name = lambda depth=2: "harness"


def serve_agents(args: argparse.Namespace) -> None:
    if not args.torch_event_names:
        cheap_event_names()
    host = Host(args, sys.stdout)
    host.emit("ready", pid=os.getpid())
    for line in sys.stdin:
        try:
            if not host.handle(json.loads(line)):
                break
        except Exception as exc:  # said on the protocol, then the process ends: the harness stops the size
            host.emit("fatal", error=f"{type(exc).__name__}: {exc}"[:500])
            break
    sys.stdout.flush()
    os._exit(0)  # agent and keep-alive threads are daemons blocked in torch: no orderly join


def serve_store(args: argparse.Namespace) -> None:
    """Host the c10d rendezvous store as torch's backend does on the first agent (is_host), until stdin closes."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend

    params = RendezvousParameters(backend="c10d", endpoint=args.endpoint, run_id=args.run_id, min_nodes=1,
                                  max_nodes=1, is_host="1")
    backend, store = create_backend(params)
    print(json.dumps({"ev": "ready", "id": None, "t": time.time(), "pid": os.getpid()}), flush=True)
    for _ in sys.stdin:
        pass
    del backend, store
    os._exit(0)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.rdzv.host", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("role", choices=["agents", "store"])
    p.add_argument("--backend", choices=["etcd-v2", "c10d"], default="c10d")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--run-id", required=True)
    p.add_argument("--nodes", default="1:1", help="MIN:MAX of the job")
    p.add_argument("--conf", default="", help="rendezvous settings as torchrun's --rdzv-conf")
    p.add_argument("--monitor-interval", type=float, default=0.1)
    p.add_argument("--dilation", type=float, default=1.0,
                   help="slow every clock torch reads by this factor (bench.rdzv.clock); 1: real time")
    p.add_argument("--epoch", type=float, default=None,
                   help="the real time.time() perceived time counts from, shared by a harness' processes")
    p.add_argument("--torch-event-names", action="store_true",
                   help="keep torch's inspect.stack() per rendezvous event (see cheap_event_names)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # a socket per agent (c10d: per agent at the store)
    threading.stack_size(RUN_AGENT_STACK)
    os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"  # as the toolkit runs jobs (JobSpec.node_env)
    if args.role == "agents":
        clock.install(args.dilation, args.epoch)
    (serve_store if args.role == "store" else serve_agents)(args)


if __name__ == "__main__":
    main()
