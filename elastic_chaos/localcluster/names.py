"""Whose is it: the names of a cluster's host resources, all carrying the cluster's own id.

A cluster makes things on the host that outlive any one process: a bridge, a veth
per node, iptables chains and the jumps into them, cgroups. Cleanup (``down``, a
failed ``up``, ``lose-node``) must remove exactly those and nothing that merely
looks like them: a bridge ``eck8s0`` or a chain ``ELASTIC-CHAOS-K8S`` made by
someone else, another checkout's live cluster (issue 25: ``down`` in a folder
with no cluster deleted them, and would have SIGKILLed whatever ran in
``elastic-chaos-cluster/ec-node-N`` cgroups).

So every cluster gets a random id when it starts, recorded in its state file
before anything is made, and every name it gives a host resource carries that
id. Cleanup derives the names from the recorded id (never from a pattern) and
removes only those. A state written before clusters had ids (no ``id`` in it)
names the fixed names of that time: :meth:`HostNames.legacy`.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
from typing import Any

ID_RE = re.compile(r"[0-9a-f]{8}")
ALIAS_PREFIX = "elastic-chaos cluster "
"""The bridge's alias (``ip link set ... alias``): this prefix, the id, then the cluster folder, so that
another checkout's ``up`` can say whose cluster holds the network."""


def new_id() -> str:
    """A fresh cluster id: 8 hex digits (short enough for 15-byte interface names)."""
    return secrets.token_hex(4)


@dataclasses.dataclass(frozen=True)
class HostNames:
    """The names one cluster gives its host resources."""

    cluster_id: str | None
    """None: a cluster started before ids (its state has none)."""
    bridge: str
    veth_prefix: str
    nat_chain: str
    in_chain: str
    fwd_chain: str
    cgroup_parent: str
    """``<hierarchy>/<cgroup_parent>/<node>`` in every cgroup hierarchy. Never ``elastic-chaos``: the
    toolkit's local platform owns that name."""
    comment: str
    """The ``-m comment`` text on the jumps into our chains."""

    @classmethod
    def for_id(cls, cluster_id: str) -> HostNames:
        if not ID_RE.fullmatch(cluster_id):
            raise ValueError(f"not a cluster id: {cluster_id!r} (8 hex digits)")
        return cls(cluster_id, bridge=f"ec{cluster_id}br", veth_prefix=f"ec{cluster_id}v",
                   nat_chain=f"ECK8S-{cluster_id}-NAT", in_chain=f"ECK8S-{cluster_id}-IN",
                   fwd_chain=f"ECK8S-{cluster_id}-FWD", cgroup_parent=f"elastic-chaos-cluster-{cluster_id}",
                   comment=f"{ALIAS_PREFIX}{cluster_id}")

    @classmethod
    def legacy(cls) -> HostNames:
        """The fixed names of clusters started before ids: only ever used for a state that says it
        made them (one without an ``id``), so such a cluster can still be brought down."""
        return cls(None, bridge="eck8s0", veth_prefix="eck8sv", nat_chain="ELASTIC-CHAOS-K8S",
                   in_chain="ELASTIC-CHAOS-K8S-IN", fwd_chain="ELASTIC-CHAOS-K8S-FWD",
                   cgroup_parent="elastic-chaos-cluster", comment="elastic-chaos local cluster")

    @classmethod
    def of(cls, state: dict[str, Any]) -> HostNames:
        """The names the recorded cluster uses (its id's, or the legacy ones when it has none)."""
        cluster_id = state.get("id")
        return cls.for_id(str(cluster_id)) if cluster_id else cls.legacy()

    def veth(self, index: int) -> str:
        """The host end of node ``index``'s link (at most 14 bytes: an interface name holds 15)."""
        return f"{self.veth_prefix}{index}"

    def alias(self, root: object) -> str:
        """What the bridge's alias says: whose cluster it is and where that cluster lives."""
        return f"{self.comment} {root}"
