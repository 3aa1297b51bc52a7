"""Stop conditions: when a game day must stop hurting and start cleaning up.

Checked before the first destructive call, while an experiment runs (it is
then stopped with StopExperiment) and while the replacement is awaited:

- the job has failed for good (every worker pod ended and at least one failed,
  with no replacement on its way);
- the deadline has passed (``--deadline``, from the start of the game day);
- a CloudWatch alarm (``--stop-alarm``) is in ALARM (it is also FIS's own stop
  condition on every template, so AWS stops an experiment even if we died).
"""
from __future__ import annotations

import time
from collections.abc import Callable

from elastic_chaos.platforms.api import NodeState, Platform
from elastic_chaos.platforms.aws.clients import alarm_state
from elastic_chaos.platforms.aws.guard import Guard


class StopConditions:
    def __init__(self, guard: Guard, *, deadline_s: float, cloudwatch: object = None,
                 alarm: str | None = None, job_failed: Callable[[], str | None] = lambda: None) -> None:
        self.guard = guard
        self.deadline = time.monotonic() + deadline_s
        self.deadline_s = deadline_s
        self.cloudwatch = cloudwatch
        self.alarm = alarm
        self.job_failed = job_failed

    def reason(self) -> str | None:
        """Why the game day must stop now, or None; once a reason is found the guard refuses
        every further destructive call but cleanup."""
        why = self._check()
        if why is not None:
            self.guard.stop(why)
        return why

    def _check(self) -> str | None:
        if self.guard.stopped:
            return self.guard.stopped
        failed = self.job_failed()
        if failed:
            return f"the job has failed for good: {failed}"
        if time.monotonic() > self.deadline:
            return f"the deadline passed ({self.deadline_s:.0f}s)"
        if self.alarm and self.cloudwatch is not None:
            state = alarm_state(self.cloudwatch, self.alarm)
            if state == "ALARM":
                return f"CloudWatch alarm {self.alarm} is in ALARM"
        return None


def pods_failed(platform: Platform) -> Callable[[], str | None]:
    """The job failed for good: it had pods, none is alive or coming, and one exited non-zero."""
    def check() -> str | None:
        nodes = platform.nodes()
        if not nodes or any(n.state.is_alive() for n in nodes) or platform.replacement_pending():
            return None
        failed = [n for n in nodes if n.state is NodeState.EXITED and n.exit_code not in (0, None)]
        if not failed:
            return None
        return ", ".join(f"{n.name} exited {n.exit_code}" for n in failed)
    return check
