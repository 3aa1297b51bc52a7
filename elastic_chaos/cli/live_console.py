"""Live progress in the terminal while a run happens: which phase, which step, how long.

Subscribes to the timeline and prints one line per notable event. On a
terminal (a TTY) the phase, training step, world size and elapsed time also
sit in one status line at the bottom, redrawn in place twice a second. When
the output is not a terminal (CI logs, a pipe) there are no control
characters at all: plain lines only, the training step at most every few
seconds, and a "still ..." line when nothing was printed for a while, so a
run never sits silent.
"""
from __future__ import annotations

import shutil
import sys
import threading
import time
from typing import TextIO

from elastic_chaos.events import (
    AgentEv,
    CheckpointEv,
    Event,
    FaultEv,
    NodeEv,
    ProgressEv,
    RdzvEv,
    RunnerEv,
    Source,
    Timeline,
    field_value,
    payload_json,
)
from elastic_chaos.events.node_events import how_lost

CLEAR = "\r\x1b[K"


class StatusLine:
    """Permanent lines above, one live line below (TTY); plain lines otherwise."""

    def __init__(self, stream: TextIO, live: bool | None = None) -> None:
        self.stream = stream
        self.live = _isatty(stream) if live is None else live
        self._status = ""
        self._lock = threading.Lock()
        self.last_said = time.monotonic()

    def say(self, text: str) -> None:
        with self._lock:
            if self.live:
                self.stream.write(CLEAR + text + "\n" + self._status)
            else:
                self.stream.write(text + "\n")
            self.stream.flush()
            self.last_said = time.monotonic()

    def status(self, text: str) -> None:
        """Redraw the live line (no-op when not a TTY)."""
        if not self.live:
            return
        width = shutil.get_terminal_size((100, 20)).columns - 1
        with self._lock:
            self._status = text[:width]
            self.stream.write(CLEAR + self._status)
            self.stream.flush()

    def clear(self) -> None:
        with self._lock:
            if self.live and self._status:
                self.stream.write(CLEAR)
                self.stream.flush()
            self._status = ""


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class ConsoleProgress:
    """Prints a run's progress; ``live`` forces (True) or disables (False) the TTY status line.

    A ticker thread redraws the status line (TTY) or prints a "still ..." line
    after ``quiet_after_s`` of silence (no TTY); it ends with the run's
    ``finished`` phase or ``close()``.
    """

    def __init__(self, timeline: Timeline, stream: TextIO | None = None,
                 step_every_s: float = 3.0, *, live: bool | None = None,
                 quiet_after_s: float = 20.0) -> None:
        self.out = StatusLine(stream or sys.stderr, live)
        self.stream = self.out.stream
        self.t0 = time.time()
        self.step_every_s = step_every_s
        self.quiet_after_s = quiet_after_s
        self.phase = "starting"
        self.step: int | None = None
        self.world_size: int | None = None
        self._last_step_print = 0.0
        self._stop = threading.Event()
        timeline.subscribe(self.on_event)
        self._ticker = threading.Thread(target=self._tick, name="console-progress", daemon=True)
        self._ticker.start()

    def elapsed(self) -> float:
        return time.time() - self.t0

    def _say(self, text: str) -> None:
        self.out.say(f"[{self.elapsed():6.1f}s] {text}")

    def status_text(self) -> str:
        step = "no step yet" if self.step is None else f"step {self.step} at world size {self.world_size}"
        return f"[{self.elapsed():6.1f}s] phase {self.phase} | {step}"

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            if self.out.live:
                self.out.status(self.status_text())
            elif time.monotonic() - self.out.last_said >= self.quiet_after_s:
                self._say(f"still in phase {self.phase}: "
                          + ("no training step yet" if self.step is None
                             else f"last step {self.step} at world size {self.world_size}"))

    def close(self) -> None:
        """Stop the ticker and clear the status line. Idempotent."""
        self._stop.set()
        if self._ticker.is_alive() and self._ticker is not threading.current_thread():
            self._ticker.join(2.0)
        self.out.clear()

    def on_event(self, e: Event) -> None:
        if e.type == RunnerEv.PHASE:
            self.phase = e.data.phase
        if e.type == ProgressEv.STEP:
            self.step = e.data.step
            self.world_size = e.data.world_size
        line = self.describe(e)
        if line:
            self._say(line)
        if e.type == RunnerEv.PHASE and e.data.phase == "finished":
            self.close()

    def describe(self, e: Event) -> str | None:
        d = e.data
        if e.type == RunnerEv.PHASE:
            extra = ", ".join(f"{k}={v}" for k, v in payload_json(d).items() if k != "phase")
            return f"phase: {d.phase}" + (f" ({extra})" if extra else "")
        if e.type == RunnerEv.ETCD_STARTED:
            return f"etcd {d.version} up at {d.endpoint} (pid {d.pid})"
        if e.type.source == Source.NODE:
            return self._node(e)
        if e.type == FaultEv.INJECTED:
            return f"FAULT {d.fault} injected" + (f" on {e.node}" if e.node else "")   # a save's corruption: no node
        if e.type.source == Source.FAULT and e.type != FaultEv.PLANNED:
            return f"fault {field_value(d, 'fault') or ''}: {e.type.name}" + (f" on {e.node}" if e.node else "")
        if e.type == RdzvEv.ROUND_COMPLETE:
            names = list(d.nodes())
            return f"rendezvous round {d.round} complete: {len(names)} node(s) {names}"
        if e.type in (RdzvEv.STORE_UNREACHABLE, RdzvEv.STORE_REACHABLE, RdzvEv.REFUSED):
            return f"rendezvous store: {e.type.name}"
        if e.type in (AgentEv.WORKER_GROUP_FAILED, AgentEv.MEMBERSHIP_CHANGE):
            return f"{e.node}: agent {e.type.name.replace('_', ' ')} {payload_json(d)}"
        if e.type == CheckpointEv.LOADED:
            return f"{e.node}: checkpoint {e.type.name} (step {d.step})" if (d.rank or 0) == 0 else None
        if e.type == CheckpointEv.CORRUPT:
            return f"{e.node}: checkpoint CORRUPT {d.path}: {d.reason}"
        if e.type == ProgressEv.STEP and d.rank == 0 and not self.out.live:
            now = time.time()
            if now - self._last_step_print >= self.step_every_s:
                self._last_step_print = now
                return f"training: step {d.step} at world size {d.world_size}"
        return None

    @staticmethod
    def _node(e: Event) -> str | None:
        d = e.data
        if e.type == NodeEv.STARTED:
            return f"{e.node}: agent started (pid {d.agent_pid})" + (f", replacing {d.replaces}" if d.replaces else "")
        if e.type == NodeEv.LOST:
            return f"{e.node}: LOST ({how_lost(d)})"
        if e.type == NodeEv.EXITED:
            return f"{e.node}: agent exited with code {d.exit_code}"
        if e.type == NodeEv.PROVISIONING:
            return f"provisioning a replacement for {d.replaces} in {d.delay_s}s"
        if e.type == NodeEv.NOTICE:
            return f"{e.node}: {d.notice} notice" + (
                f", terminating in {d.terminate_at - e.t:.0f}s" if d.terminate_at is not None else "")
        return None
        return None
