"""What a shrink cannot beat: the rendezvous mechanism's own limit on a recovery, from the job's settings.

After a node is gone the survivors form a smaller world only once it has left the rendezvous. A node
that leaves (``--leave-on-sigterm``: torch's own exit operation) is out at once; a node lost hard, or
one that got SIGTERM from an agent that does not leave (torch 2.13's does not), is removed only when its
heartbeat expires: ``keep_alive_interval`` K x ``keep_alive_max_attempt`` A after the heartbeat it last
wrote. torch writes a heartbeat only when the last one is at least K old, so on a timer of the same
period they land about every 2 K: at the loss the last one is 0 to 2 K old, and the expiry falls
K x (A - 2) to K x A after it. Then the round waits ``last_call_timeout`` for latecomers, a waiting
node sees the state at its next one-second poll, and the restarted workers take the floor (a worker's
cold start: spawn, import torch, process-group init, checkpoint load, one step). So, from the fault to
the first step of the smaller world (a recovery; retraining lost steps comes after):

    hard loss:  detect + K x (A - 2) + last call + floor  <=  recovery  <=  detect + K x A + last call + 1 + floor
    left:       detect + last call + floor                <=  recovery  <=  detect + last call + 1 + floor

``detect`` is the measured time until the job noticed (for a spot interruption, the departing worker's
save and exit). docs/PRESETS.md derives the same and measures it. Pure arithmetic, no torch.
"""
from __future__ import annotations

from dataclasses import dataclass

POLL_S = 1.0
"""A node waiting for the next round reads the state once a second (torch's ``_Action.SYNC`` wait)."""


@dataclass(frozen=True)
class Limit:
    """The least and the most a recovery takes by the mechanism alone, and its parts (low, high)."""

    detect_s: float
    expiry_s: tuple[float, float]
    """The dead node's heartbeat expiring, after the loss ((0, 0) when it left)."""
    last_call_s: float
    poll_s: tuple[float, float]
    floor_s: float

    @property
    def low_s(self) -> float:
        return self.detect_s + self.expiry_s[0] + self.last_call_s + self.poll_s[0] + self.floor_s

    @property
    def high_s(self) -> float:
        return self.detect_s + self.expiry_s[1] + self.last_call_s + self.poll_s[1] + self.floor_s

    @property
    def rendezvous_s(self) -> tuple[float, float]:
        """What the rendezvous phase of a recovery (bench's phases) may take by the mechanism."""
        return (self.expiry_s[0] + self.last_call_s + self.poll_s[0],
                self.expiry_s[1] + self.last_call_s + self.poll_s[1])

    def beyond(self, phases: dict[str, float]) -> tuple[str, float] | None:
        """The phase that took the most beyond what the mechanism allows it, with the seconds (None: none
        did): the rendezvous against its part, the restart against the floor."""
        over = {"rendezvous": phases.get("rendezvous", 0.0) - self.rendezvous_s[1],
                "restart": phases.get("restart", 0.0) - self.floor_s,
                "detect": phases.get("detect", self.detect_s) - self.detect_s}
        phase, seconds = max(over.items(), key=lambda kv: kv[1])
        return (phase, seconds) if seconds > 0 else None


def shrink_limit(*, detect_s: float, floor_s: float, keep_alive_interval: float, keep_alive_max_attempt: int,
                 last_call_s: float, left: bool) -> Limit:
    """The limit of a recovery to a smaller world (see the module docstring); ``left``: the departing node
    left the rendezvous itself (``--leave-on-sigterm``), else it is waited out."""
    k, a = keep_alive_interval, keep_alive_max_attempt
    expiry = (0.0, 0.0) if left else (k * max(a - 2, 0), k * a)
    return Limit(detect_s, expiry, last_call_s, (0.0, POLL_S), floor_s)
