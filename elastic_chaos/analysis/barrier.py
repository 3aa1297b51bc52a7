"""A node lost right after a rendezvous round closed: the survivors wait in the rank exchange.

When an etcd-v2 round closes, torchrun's agents are not done: rank 0 writes the
master address and the worker ranks into the round's store (an EtcdStore), and
every other agent blocks reading them (``RendezvousStoreInfo.build``,
``SimpleElasticAgent._assign_worker_ranks``; torch 2.13). That read waits the
store's default timeout, 300 s, and nothing shortens it: no keep-alive, no
waiting node. A participant lost in that window (0.6-0.9 s with two nodes on
the local platform, measured from the round's close to the agents' "Rendezvous
complete") leaves the others deaf for five minutes: a replacement waits to
join, the job trains nothing. :func:`stalls` finds that in a timeline, so a run
that timed out says why instead of only "did not recover".
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from elastic_chaos.events import AgentEv, Event, NodeEv, RdzvEv, first, of

STORE_TIMEOUT_S = 300.0
"""The EtcdStore's timeout: c10d's default store timeout; torch's etcd-v2 handler sets none."""


@dataclass(frozen=True)
class BarrierStall:
    """Round ``round`` closed at ``closed_at``; ``lost`` was lost ``lost_after_s`` later, before its
    agent finished the round; the agents of ``waiting`` never finished it."""

    round: int | None
    closed_at: float
    lost: str
    lost_after_s: float
    waiting: tuple[str, ...]

    def describe(self) -> str:
        who = ", ".join(self.waiting)
        verb = "is" if len(self.waiting) == 1 else "are"
        return (f"{who} {verb} stuck in round {self.round}'s rank exchange: {self.lost} was lost "
                f"{self.lost_after_s:.2f}s after the round closed, before the agents had read the master "
                f"address and their worker ranks from the round's store. torchrun waits for them there "
                f"with the store's {STORE_TIMEOUT_S:.0f}s timeout, which no keep-alive shortens, and a "
                f"node waiting to join is not let in meanwhile (a TorchElastic hazard: docs/FAULTS.md, "
                f"loss-after-round)")


def stalls(events: Sequence[Event], *, until: float | None = None) -> list[BarrierStall]:
    """Every round a participant of which was lost before it finished the round while another
    participant's agent never finished a round again (up to ``until``, or the timeline's end)."""
    done = of(events, AgentEv.RENDEZVOUS_COMPLETE, until=until)
    losses = of(events, NodeEv.LOST, until=until)
    out: list[BarrierStall] = []
    closes = of(events, RdzvEv.ROUND_COMPLETE, until=until)
    for i, closed in enumerate(closes):
        ends = closes[i + 1].t if i + 1 < len(closes) else until
        nodes = closed.data.nodes()
        lost = {n: e for n in nodes if (e := first(losses, node=n, after=closed.t, until=ends))}
        finished = {n: e.t for n in nodes if (e := first(done, node=n, after=closed.t, until=ends))}
        # stuck: neither lost nor ever done with a round again (one that was had not been waiting here)
        stuck = tuple(n for n in nodes if n not in lost and first(done, node=n, after=closed.t) is None)
        for node, loss in lost.items():
            if node in finished and finished[node] < loss.t:
                continue        # it had finished the round: an ordinary loss
            waiting = tuple(n for n in stuck if n != node)
            if waiting:
                out.append(BarrierStall(closed.data.round, closed.t, node,
                                        loss.t - closed.t, waiting))
    return out
