"""elastic_chaos.trainer.pacing: a step's wait advances only while the process could run, so a stopped
node steps slower; an unstopped one paces as a sleep would."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from elastic_chaos.trainer.pacing import SLICE_S, STALL_S, pace


class FakeTime:
    """A clock that advances by what each sleep is told, plus a stall injected at one slice."""

    def __init__(self, stall_at: int = -1, stall_s: float = 0.0) -> None:
        self.now, self.slices, self.stall_at, self.stall_s = 0.0, 0, stall_at, stall_s

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s + (self.stall_s if self.slices == self.stall_at else 0.0)
        self.slices += 1


def test_an_unstopped_pace_takes_its_seconds():
    t = FakeTime()
    assert abs(pace(0.1, clock=t.clock, sleep=t.sleep) - 0.1) < 1e-9
    assert t.slices == round(0.1 / SLICE_S)


def test_a_stop_during_the_pace_is_not_counted():
    t = FakeTime(stall_at=3, stall_s=0.5)
    took = pace(0.1, clock=t.clock, sleep=t.sleep)
    assert abs(took - 0.6) < 1e-9, "the 0.5 s stop comes on top of the 0.1 s of running time"


def test_a_scheduling_delay_below_the_stall_threshold_counts_as_time_passed():
    t = FakeTime(stall_at=0, stall_s=STALL_S / 2)
    assert pace(0.1, clock=t.clock, sleep=t.sleep) < 0.1 + STALL_S / 2 + SLICE_S


def test_nothing_to_pace_returns_at_once():
    assert pace(-1.0) < 0.01


def test_a_real_process_stopped_for_half_a_second_paces_half_a_second_longer():
    code = ("import time; from elastic_chaos.trainer.pacing import pace; t=time.monotonic(); pace(1.0); "
            "print(time.monotonic()-t)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    time.sleep(0.4)  # interpreter start-up, then inside pace
    os.kill(proc.pid, signal.SIGSTOP)
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGCONT)
    out, _ = proc.communicate(timeout=20)
    assert 1.4 <= float(out) <= 1.8, out
