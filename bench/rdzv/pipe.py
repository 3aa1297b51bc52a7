"""One process of the rendezvous lab, from the harness' side: started, driven over its stdin, heard on its stdout.

A host process (bench/rdzv/host.py: many hollow agents, or the c10d store) speaks one JSON object per line
each way; :class:`HostProcess` starts it with the kernel's death signal (it dies with the harness), sends it
orders, reads its events into the harness' queue from a thread, and stops it by its PID.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from elastic_chaos.errors import ChaosError
from elastic_chaos.host import lifeline


class HarnessError(ChaosError):
    """A host process or the store failed; the message says which and where its log is."""


class HostProcess:
    """A host process, its stdin, and a thread that reads its events into a queue."""

    def __init__(self, cmd: list[str], log_path: Path, events: queue.Queue[dict[str, Any]]) -> None:
        self.log_path = log_path
        with open(log_path, "wb") as err:
            self.proc = lifeline.popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                       env={**os.environ, "PYTHONPATH": _pythonpath()})
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._stdin: TextIO = open(self.proc.stdin.fileno(), "w", closefd=False)
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout, events), daemon=True,
                                        name=f"scale-host-{self.proc.pid}")
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, cmd: dict[str, Any]) -> None:
        try:
            self._stdin.write(json.dumps(cmd) + "\n")
            self._stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise HarnessError(f"host process {self.pid} is gone ({exc}); its log: {self.log_path}") from exc

    def _read(self, out: Any, events: queue.Queue[dict[str, Any]]) -> None:
        for raw in out:
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            event["pid"] = event.get("pid", self.pid)
            events.put(event)
        events.put({"ev": "exited", "id": None, "t": time.time(), "pid": self.pid})

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask it to exit, then SIGKILL it by PID if it has not. Idempotent."""
        if self.proc.poll() is None:
            try:
                self.send({"cmd": "exit"})
            except HarnessError:
                pass
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout_s)
        self._reader.join(timeout_s)
        for stream in (self._stdin, self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:  # a pipe whose reader is gone
                pass


def _pythonpath() -> str:
    """The repository's root first, so host processes import the same bench/, elastic_chaos/ and trainer/."""
    root = str(Path(__file__).resolve().parents[2])
    return os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])
