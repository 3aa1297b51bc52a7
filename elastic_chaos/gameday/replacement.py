"""How long a lost node took to be replaced, split by whose hands it was in.

From the game day's timeline (see :mod:`elastic_chaos.watchers.replacement`):

- ``provision_s``: the node was lost (a targeted instance left ``running``; else
  the fault's time) -> the replacement instance is ``running`` (the Auto
  Scaling group's and EC2's part; the cluster-autoscaler's too when it had to
  raise the desired capacity);
- ``join_s``: instance running -> its Kubernetes node is Ready (boot, kubelet);
- ``rendezvous_s``: node Ready -> the next complete rendezvous round (the
  controller's new pod starting and joining);
- ``replacement_s``: their sum, node lost -> rendezvous.

A mark that was not observed is None, and so is every later one and the sum;
``missing`` says why. Nothing is guessed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from elastic_chaos.events import Event, NodeEv, RdzvEv, of

GONE = ("shutting-down", "terminated", "stopping", "stopped")


@dataclass(frozen=True)
class ReplacementSplit:
    lost_at: float
    running_at: float | None = None
    joined_at: float | None = None
    rendezvous_at: float | None = None
    instance: str | None = None
    missing: tuple[str, ...] = field(default_factory=tuple)

    @staticmethod
    def _span(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else round(b - a, 3)

    @property
    def provision_s(self) -> float | None:
        return self._span(self.lost_at, self.running_at)

    @property
    def join_s(self) -> float | None:
        return self._span(self.running_at, self.joined_at)

    @property
    def rendezvous_s(self) -> float | None:
        return self._span(self.joined_at, self.rendezvous_at)

    @property
    def replacement_s(self) -> float | None:
        return self._span(self.lost_at, self.rendezvous_at) if self.joined_at is not None else None

    def to_json(self) -> dict[str, Any]:
        return {"lost_at": self.lost_at, "instance": self.instance, "provision_s": self.provision_s,
                "join_s": self.join_s, "rendezvous_s": self.rendezvous_s, "replacement_s": self.replacement_s,
                "missing": list(self.missing)}


def split(events: list[Event], *, fault_at: float, targets: list[str]) -> ReplacementSplit:
    """The replacement split of the first replacement after ``fault_at`` of ``targets``."""
    states = of(events, NodeEv.INSTANCE_STATE)
    lost = [e.t for e in states if e.data.instance in targets
            and e.data.state in GONE and e.t >= fault_at - 1]
    lost_at = min(lost) if lost else fault_at
    running = [e for e in states if e.data.new and e.data.state == "running" and e.t >= lost_at - 1]
    if not running:
        return ReplacementSplit(lost_at, missing=("no replacement instance reached running",))
    first = min(running, key=lambda e: e.t)
    instance = first.data.instance
    joined = [e.t for e in of(events, NodeEv.INSTANCE_JOINED) if e.data.instance == instance]
    if not joined:
        return ReplacementSplit(lost_at, first.t, instance=instance,
                                missing=("its Kubernetes node was not seen Ready (no --job, or it did not join)",))
    rounds = [e.t for e in of(events, RdzvEv.ROUND_COMPLETE) if e.t >= min(joined)]
    if not rounds:
        return ReplacementSplit(lost_at, first.t, min(joined), instance=instance,
                                missing=("no complete rendezvous round after it joined (no --etcd/--run-id, "
                                         "or the job did not re-form)",))
    return ReplacementSplit(lost_at, first.t, min(joined), min(rounds), instance=instance)
