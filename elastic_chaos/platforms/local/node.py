"""One node of the local platform as the platform keeps it: its agent, log, network, metadata."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from elastic_chaos.platforms.local.imds import MetadataStandIn
from elastic_chaos.platforms.local.relay import StallableRelay
from elastic_chaos.platforms.nodes import NodeInfo


@dataclass
class LocalNode:
    """One node of the local platform: its agent process and what the node was given."""

    info: NodeInfo
    proc: subprocess.Popen[bytes]
    tag: str
    log_path: Path
    imds: MetadataStandIn
    relay: StallableRelay | None = None
    address: str = "127.0.0.1"
    fault_pending: bool = False


@dataclass
class Pending:
    """A replacement the node pool will start when it is due."""

    due: float
    replaces: str
