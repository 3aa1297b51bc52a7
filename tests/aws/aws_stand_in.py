"""Plays AWS's part where moto only keeps books.

moto's FIS moves an experiment's state and does nothing to instances. On AWS,
a completed ``aws:ec2:send-spot-instance-interruptions`` experiment has
interrupted (terminated) its targets; so this thread watches moto's
experiments (directly, not through the counting proxy) and terminates the
resolved targets of each one that completed -- the effect AWS would have had.
"""
from __future__ import annotations

import threading
from typing import Any


class FisEffect:
    def __init__(self, fis: Any, ec2: Any, *, interval_s: float = 0.1) -> None:
        self.fis, self.ec2 = fis, ec2
        self.interval_s = interval_s
        self.terminated: list[str] = []
        self.seen: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="fis-effect")

    def __enter__(self) -> FisEffect:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        assert not self._thread.is_alive(), "the AWS stand-in did not stop"
        self._poll()  # AWS interrupts at completion, however late this thread would have looked

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._poll()

    def _poll(self) -> None:
        for exp in self.fis.list_experiments().get("experiments", []):
            status = exp["state"]["status"]
            if status == "completed" and self.seen.get(exp["id"]) != "completed":
                self._interrupt(exp["id"])
            self.seen[exp["id"]] = status

    def _interrupt(self, experiment_id: str) -> None:
        resolved = self.fis.list_experiment_resolved_targets(experimentId=experiment_id)["resolvedTargets"]
        ids = [t["targetInformation"]["arn"].rsplit("/", 1)[-1] for t in resolved
               if t["resourceType"] == "aws:ec2:spot-instance"]
        if ids:
            self.ec2.terminate_instances(InstanceIds=ids)
            self.terminated += ids
