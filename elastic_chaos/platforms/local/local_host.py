"""What the local capabilities ask of their platform (LocalPlatform is one): its own module, so that
a capability in a module of its own (links.py) and the module that lists them all (capabilities.py)
both import it without importing each other."""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from elastic_chaos.host import netns
from elastic_chaos.platforms import capabilities as caps
from elastic_chaos.platforms.local.hung import HungWorkers
from elastic_chaos.platforms.local.node import LocalNode
from elastic_chaos.platforms.nodes import NodeInfo
from elastic_chaos.platforms.slowdown import Slowdowns
from elastic_chaos.platforms.storage import StorageLayer

if TYPE_CHECKING:
    from elastic_chaos.host.cgroup import NodeCgroups
    from elastic_chaos.host.etcd import EtcdServer
    from elastic_chaos.platforms.local.guard import RunGuard


class LocalHost(caps.Host, Protocol):
    """What the local capabilities need of their platform (LocalPlatform is one)."""

    etcd: EtcdServer | None
    network: netns.NodeNetwork | None
    cgroups: NodeCgroups | None
    guard: RunGuard | None
    slowdowns: Slowdowns
    hung: HungWorkers
    storage_layer: StorageLayer | None

    def record(self, node: str) -> LocalNode | None:
        """The node's record (None: no such node)."""

    def isolated(self) -> bool:
        """Whether the nodes run in network namespaces of their own."""

    def spawn_node(self) -> NodeInfo:
        """Start one more node of the running job."""
