"""Live progress in the terminal while a run happens: which phase, which step.

Subscribes to the timeline and prints one plain line per notable event (no
control characters, so CI logs stay clean), plus the training step at most
every few seconds. A run never sits silent.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from chaos.events import Event, Timeline


class ConsoleProgress:
    def __init__(self, timeline: Timeline, stream: TextIO | None = None,
                 step_every_s: float = 3.0) -> None:
        self.stream = stream or sys.stderr
        self.t0 = time.time()
        self.step_every_s = step_every_s
        self._last_step_print = 0.0
        self._lock = threading.Lock()
        timeline.subscribe(self.on_event)

    def _say(self, text: str) -> None:
        with self._lock:
            self.stream.write(f"[{time.time() - self.t0:6.1f}s] {text}\n")
            self.stream.flush()

    def on_event(self, e: Event) -> None:
        line = self.describe(e)
        if line:
            self._say(line)

    def describe(self, e: Event) -> str | None:
        d = e.data
        if e.source == "runner" and e.kind == "phase":
            extra = ", ".join(f"{k}={v}" for k, v in d.items() if k != "phase")
            return f"phase: {d['phase']}" + (f" ({extra})" if extra else "")
        if e.source == "runner" and e.kind == "etcd_started":
            return f"etcd {d.get('version')} up at {d.get('endpoint')} (pid {d.get('pid')})"
        if e.source == "node":
            return {"started": f"{e.node}: agent started (pid {d.get('agent_pid')})"
                    + (f", replacing {d['replaces']}" if d.get("replaces") else ""),
                    "lost": f"{e.node}: LOST ({d.get('action')}, {len(d.get('pids', []))} processes)",
                    "exited": f"{e.node}: agent exited with code {d.get('exit_code')}",
                    "provisioning": f"provisioning a replacement for {d.get('replaces')} "
                                    f"in {d.get('delay_s')}s"}.get(e.kind)
        if e.source == "fault" and e.kind == "injected":
            return f"FAULT {d.get('fault')} injected on {e.node}"
        if e.source == "rendezvous" and e.kind == "round_complete":
            names = [p.get("node") or p.get("id") for p in d.get("participants", [])]
            return f"rendezvous round {d.get('round')} complete: {len(names)} node(s) {names}"
        if e.source == "rendezvous" and e.kind in ("store_unreachable", "store_reachable", "refused"):
            return f"rendezvous store: {e.kind}"
        if e.source == "agent" and e.kind in ("worker_group_failed", "membership_change"):
            return f"{e.node}: agent {e.kind.replace('_', ' ')} {d}"
        if e.source == "checkpoint" and e.kind in ("loaded", "corrupt"):
            if e.kind == "loaded" and d.get("rank", 0) != 0:
                return None
            return f"{e.node}: checkpoint {e.kind} (step {d.get('step')})" if e.kind == "loaded" \
                else f"{e.node}: checkpoint CORRUPT {d.get('path')}: {d.get('reason')}"
        if e.source == "progress" and e.kind == "step" and d.get("rank") == 0:
            now = time.time()
            if now - self._last_step_print >= self.step_every_s:
                self._last_step_print = now
                return f"training: step {d.get('step')} at world size {d.get('world_size')}"
        return None
