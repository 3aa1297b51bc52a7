"""A spot interruption, in AWS's order: rebalance recommendation, notice, SIGTERM, SIGKILL.

On EC2, a reclaimed spot instance first gets a rebalance recommendation
(often, not always), then the interruption notice two minutes before it is
stopped; at that time the OS shuts down: processes get SIGTERM and, after
the shutdown grace, SIGKILL. Both notices appear in the instance metadata,
where a careful training script looks (the reference trainer checkpoints as
soon as it sees one). The defaults are scaled down from AWS's 2 minutes so
CI stays fast; ``aws_timing()`` gives the real ones.

``injected_at`` of the record is the SIGTERM — the moment the node starts
going away — so lost steps count from there; the notice times are kept in
the record.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

from elastic_chaos.events import Timeline
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.api import Fault, FaultPlan, pick_victim
from elastic_chaos.options import DAY_S, option
from elastic_chaos.platforms.api import Platform
from elastic_chaos.platforms.capabilities import Capability, NoticeSender

AWS_NOTICE_S = 120.0
AWS_TIMING: dict[str, float] = {"rebalance_lead_s": 10.0, "notice_s": AWS_NOTICE_S, "grace_s": 30.0}
"""AWS's own sequence: rebalance recommendation, 2-minute notice, 30 s shutdown grace."""


@dataclass
class SpotInterruption(Fault):
    node: str | None = None
    rebalance_lead_s: float | None = option(2.0, "seconds from the rebalance recommendation to the notice "
                                                 "(none: no recommendation is sent)", flag="--rebalance-lead",
                                            minimum=0, units="s", maximum=DAY_S)
    notice_s: float = option(8.0, "seconds from the interruption notice to SIGTERM (AWS: 120)", flag="--notice",
                             minimum=0, units="s", maximum=DAY_S)
    grace_s: float = option(20.0, "seconds from SIGTERM to SIGKILL of whatever is left", flag="--grace",
                            minimum=0, units="s", maximum=DAY_S)
    name: ClassVar[str] = "spot-interruption"
    description: ClassVar[str] = ("AWS spot reclaim: rebalance recommendation, interruption notice, "
                                  "SIGTERM after the notice, SIGKILL after the grace period")
    requires: ClassVar[type[Capability] | None] = NoticeSender

    @classmethod
    def aws_timing(cls, node: str | None = None) -> SpotInterruption:
        """AWS's own timing: a 2-minute notice."""
        return cls(node=node, **AWS_TIMING)

    def plan(self, platform: Platform) -> FaultPlan:
        target = pick_victim(platform, self.node)
        steps = []
        if self.rebalance_lead_s is not None:
            steps.append(f"publish a rebalance recommendation for {target}; wait {self.rebalance_lead_s:g}s")
        steps += [f"publish the interruption notice for {target}; wait {self.notice_s:g}s",
                  *platform.kill_plan(target, graceful=True), f"(grace period {self.grace_s:g}s)"]
        return FaultPlan(self.name, target, tuple(steps))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        assert plan.target is not None
        notices = platform.capability(NoticeSender)
        detail: dict[str, object] = {"notice_s": self.notice_s, "grace_s": self.grace_s}
        if self.rebalance_lead_s is not None:
            terminate_at = time.time() + self.rebalance_lead_s + self.notice_s
            detail["rebalance_at"] = notices.send_notice(plan.target, "rebalance", terminate_at=terminate_at).at
            time.sleep(self.rebalance_lead_s)
        notice = notices.send_notice(plan.target, "interruption", terminate_at=time.time() + self.notice_s)
        detail["notice_at"] = notice.at
        time.sleep(max(0.0, notice.at + self.notice_s - time.time()))
        hit = platform.kill_node(plan.target, graceful=True, grace_s=self.grace_s)
        return FaultRecord(self.name, plan.target, hit.at, hit, detail)
