"""What to run: the elastic job and its rendezvous settings, as frozen dataclasses.

A JobSpec is platform-neutral: the local platform turns it into torchrun
command lines, the Kubernetes platform into manifests. ``None`` for a
rendezvous setting means "torch's default", so a report can say which
settings were tuned and which were not.
"""
from __future__ import annotations

import enum
import re
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from chaos.errors import SpecError


class RdzvBackend(str, enum.Enum):
    ETCD_V2 = "etcd-v2"
    C10D = "c10d"

    def needs_etcd(self) -> bool:
        return self is RdzvBackend.ETCD_V2


@dataclass(frozen=True)
class RendezvousSpec:
    """Rendezvous backend and the dynamic-rendezvous knobs torchrun takes as --rdzv-conf."""

    backend: RdzvBackend = RdzvBackend.ETCD_V2
    """etcd-v2 (an etcd server holds the state) or c10d (a TCPStore on one node)."""
    join_timeout: float | None = None
    """Seconds a node waits for the rendezvous to form before giving up (torch: 600)."""
    last_call_timeout: float | None = None
    """Extra seconds a round waits for more nodes once min_nodes joined (torch: 30)."""
    close_timeout: float | None = None
    """Seconds to close the rendezvous after a node leaves for good (torch: 30)."""
    keep_alive_interval: float | None = None
    """Seconds between a node's heartbeats (torch: 5)."""
    keep_alive_max_attempt: int | None = None
    """Missed heartbeats after which a node counts as dead (torch: 3)."""

    def conf(self) -> dict[str, str]:
        """The non-default settings as torchrun's ``--rdzv-conf`` key/values."""
        names = {"join_timeout": "join_timeout", "last_call_timeout": "last_call_timeout",
                 "close_timeout": "close_timeout", "keep_alive_interval": "keep_alive_interval",
                 "keep_alive_max_attempt": "keep_alive_max_attempt"}
        out: dict[str, str] = {}
        for attr, key in names.items():
            value = getattr(self, attr)
            if value is not None:
                out[key] = str(int(value)) if float(value).is_integer() else str(value)
        return out


_NODES = re.compile(r"^(\d+)(?::(\d+))?$")


def parse_nodes(nodes: str) -> tuple[int, int]:
    """``"1:2"`` -> (1, 2); ``"2"`` -> (2, 2). Raises SpecError with the accepted forms."""
    m = _NODES.match(nodes.strip())
    if not m:
        raise SpecError(f"nodes {nodes!r} is not MIN:MAX or N (for example 1:2)")
    lo = int(m[1])
    hi = int(m[2]) if m[2] else lo
    if lo < 1 or hi < lo:
        raise SpecError(f"nodes {nodes!r}: need 1 <= MIN <= MAX")
    return lo, hi


@dataclass(frozen=True)
class JobSpec:
    """An elastic training job: how many nodes, what each runs, how it restarts."""

    nodes: str = "1:2"
    """Elastic node range MIN:MAX (torchrun --nnodes)."""
    nproc_per_node: int = 1
    """Worker processes per node (GPUs per node on a GPU cluster)."""
    start_nodes: int | None = None
    """Nodes started at first (default: MAX); fewer leaves room to scale up."""
    rdzv: RendezvousSpec = field(default_factory=RendezvousSpec)
    max_restarts: int = 3
    """Worker-group restarts each agent may spend before the job fails."""
    monitor_interval: float | None = None
    """Seconds between the agent's checks of its workers (torch: 0.1)."""
    checkpoint_every: int = 20
    """Steps between checkpoints of the reference trainer."""
    step_time: float = 0.1
    """Minimum seconds per training step of the reference trainer."""
    script: tuple[str, ...] = ()
    """A user's training script and its arguments; empty = the reference trainer."""
    trainer_args: tuple[str, ...] = ()
    """Extra arguments for the reference trainer."""
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment variables for every node."""
    share_agent_store: bool = False
    """Let torchrun's agents share their TCPStore with the workers (torch's default
    since 2.4). Off by default: with sharing on, torch 2.13's dynamic rendezvous
    never publishes the store address to a node that joins a round whose rank 0
    is a surviving node, so a replacement node waits forever in
    ``RendezvousStoreInfo.build``. Sets ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE``."""
    run_id: str = field(default_factory=lambda: f"chaos-{uuid.uuid4().hex[:8]}")

    def __post_init__(self) -> None:
        parse_nodes(self.nodes)
        if self.nproc_per_node < 1:
            raise SpecError("nproc_per_node must be >= 1")
        if self.checkpoint_every < 1:
            raise SpecError("checkpoint_every must be >= 1")
        if self.max_restarts < 0:
            raise SpecError("max_restarts must be >= 0")
        if self.start_nodes is not None and not self.min_nodes <= self.start_nodes <= self.max_nodes:
            raise SpecError(f"start_nodes {self.start_nodes} is outside nodes {self.nodes}")

    @property
    def initial_nodes(self) -> int:
        return self.start_nodes if self.start_nodes is not None else self.max_nodes

    def node_env(self) -> dict[str, str]:
        """Environment every node of the job gets (the spec's ``env`` wins)."""
        return {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0" if self.share_agent_store else "1",
                **dict(self.env)}

    @property
    def min_nodes(self) -> int:
        return parse_nodes(self.nodes)[0]

    @property
    def max_nodes(self) -> int:
        return parse_nodes(self.nodes)[1]

    def to_json(self) -> dict[str, Any]:
        """The spec as report.json's ``job`` object."""
        d = asdict(self)
        d["rdzv_backend"] = self.rdzv.backend.value
        d["rdzv"] = {k: (v.value if isinstance(v, enum.Enum) else v) for k, v in asdict(self.rdzv).items()}
        d["env"] = dict(self.env)
        d["script"] = list(self.script)
        d["trainer_args"] = list(self.trainer_args)
        return d
