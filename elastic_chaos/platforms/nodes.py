"""What a platform says about its nodes, and what a fault hit: shared by the platform
contract (elastic_chaos.platforms.api) and its capabilities (elastic_chaos.platforms.capabilities)."""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from elastic_chaos.events.records import Hit

__all__ = ["Hit", "NodeInfo", "NodeState", "now"]


class NodeState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    LOST = "lost"          # taken away by a fault
    EXITED = "exited"      # its agent ended on its own (job done or failed)
    STOPPED = "stopped"    # stopped by the platform at the end of a run

    def is_alive(self) -> bool:
        return self in (NodeState.STARTING, NodeState.RUNNING)


@dataclass(frozen=True)
class NodeInfo:
    name: str
    state: NodeState
    started_at: float
    agent_pid: int | None = None
    replaces: str | None = None
    exit_code: int | None = None
    labels: dict[str, str] = field(default_factory=dict)


def now() -> float:
    return time.time()
