"""The ec2 platform: an already running job's nodes as EC2 instances chosen by tags.

A game day without Kubernetes access (or on instances that are not EKS nodes)
aims at the instances carrying every ``--tag`` given, e.g. a node group's
``eks:nodegroup-name``. It attaches: it starts no job and stops none, and its
only way to hurt a node is an AWS call through the Guard. The AWS faults
(:mod:`elastic_chaos.faults.aws`) work on it as on the eks platform; the Kubernetes
ones need ``--job`` (the eks platform).
"""
from __future__ import annotations

import time
from pathlib import Path

from elastic_chaos.errors import PlatformError
from elastic_chaos.events import Timeline
from elastic_chaos.platforms.api import Hit, NodeInfo, NodeState, Platform
from elastic_chaos.platforms.aws.targets import AwsSide, Target
from elastic_chaos.spec import JobSpec


class Ec2Platform(Platform):
    name = "ec2"

    def __init__(self, timeline: Timeline, work_dir: Path, *, aws_side: AwsSide) -> None:
        super().__init__(timeline, work_dir)
        self.aws_side = aws_side

    def aws_population(self) -> list[Target]:
        return self.aws_side.by_tags()

    def _start(self, job: JobSpec) -> None:
        raise PlatformError("the ec2 platform attaches to instances that already run a job; it starts none "
                            "(use --platform eks or kubernetes to start a job)")

    def _stop(self) -> None:
        """Nothing to stop: the platform never started anything. Idempotent."""

    def nodes(self) -> list[NodeInfo]:
        out = []
        for t in self.aws_side.by_tags():
            state = NodeState.RUNNING if t.instance.state == "running" else NodeState.STARTING
            out.append(NodeInfo(name=t.name, state=state, started_at=t.instance.launch_time or 0.0,
                                labels={"instance": t.instance.id, "spot": str(t.instance.spot).lower()}))
        return out

    def node_logs(self) -> dict[str, Path]:
        return {}

    def etcd_endpoint(self) -> str | None:
        return None

    def _kill_node(self, node: str, *, graceful: bool, grace_s: float) -> Hit:
        """TerminateInstances (EC2 shuts the OS down: graceful either way)."""
        at = self.aws_side.actions.terminate([node])
        return Hit(node=node, at=at or time.time(), action="ec2-terminate", detail={"instance": node})
