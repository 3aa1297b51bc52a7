"""Node loss: the instance is gone, the kernel closes its sockets (kill-node)."""
from __future__ import annotations

from dataclasses import dataclass

from chaos.faults.api import Fault, FaultPlan, FaultRecord, pick_victim
from chaos.platforms.api import Platform


@dataclass
class KillNode(Fault):
    """Hard node loss: every process of the node SIGKILLed at once."""

    node: str | None = None
    kind = "kill-node"
    description = "hard node loss: every process of one node killed at once (SIGKILL)"

    def plan(self, platform: Platform) -> FaultPlan:
        target = pick_victim(platform, self.node)
        return FaultPlan(self.kind, target, (f"SIGSTOP every process of {target}",
                                             f"SIGKILL every process of {target}"))

    def _inject(self, platform: Platform, plan: FaultPlan) -> FaultRecord:
        assert plan.target is not None
        hit = platform.kill_node(plan.target, graceful=False)
        return FaultRecord(self.kind, plan.target, hit.at, hit)
