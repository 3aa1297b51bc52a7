"""Builders shared by the aws tests: a guard with its audit log and journal, a platform."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_fleet import CLUSTER_TAGS, FIS_ROLE

from elastic_chaos.events import Timeline
from elastic_chaos.platforms.aws.ec2 import Ec2Platform
from elastic_chaos.platforms.aws.guard import AuditLog, CleanupJournal, Guard, SafetyLimits
from elastic_chaos.platforms.aws.targets import AwsSide


def side(clients: Any, state: Path, *, armed: bool = True, dry_run: bool = False, max_nodes: int = 1,
         max_percent: float = 50.0, stop_alarm: str | None = None, run_id: str = "test-run") -> AwsSide:
    guard = Guard(dry_run=dry_run, armed=armed, audit=AuditLog(state / "audit.jsonl", run_id),
                  journal=CleanupJournal(state / "cleanup-journal.jsonl", run_id))
    return AwsSide(clients, guard, run_id=run_id, limits=SafetyLimits(max_nodes, max_percent),
                   tags=dict(CLUSTER_TAGS), fis_role_arn=FIS_ROLE, stop_alarm=stop_alarm)


def platform(aws: AwsSide, tmp: Path) -> Ec2Platform:
    return Ec2Platform(Timeline(), tmp, aws_side=aws)
