"""Test helper: the processes a run left, found from the outside, and stopped by PID.

Independent of the toolkit's own bookkeeping (which is what is under test): a
process belongs to the run in ``folder`` when its environment carries the run's
node tag (``ELASTIC_CHAOS_NODE=<run id>/...``, the run id read from the run's
timeline) or its command line names the folder (etcd's ``--data-dir``, the
trainer's ``--checkpoint-dir``). Only for checking and for a failed test's
cleanup; nothing is ever matched by a program's name.
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path


def run_id_of(folder: Path) -> str | None:
    try:
        for line in (folder / "timeline.jsonl").read_text().splitlines():
            ev = json.loads(line)
            if ev.get("kind") == "job_started":
                return str(ev["data"]["run_id"])
    except (OSError, ValueError, KeyError):
        pass
    return None


def processes_of(folder: Path, run_id: str | None = None) -> dict[int, str]:
    """PID -> command line of every live (not zombie) process of the run in ``folder``."""
    run_id = run_id or run_id_of(folder)
    tag = f"ELASTIC_CHAOS_NODE={run_id}/".encode() if run_id else None
    needle = str(folder.resolve()).encode()
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except (OSError, IndexError):
            continue
        if state == "Z":
            continue
        if needle in cmdline or (tag is not None and any(e.startswith(tag) for e in environ.split(b"\0"))):
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")[:160]
    return found


def wait_until_gone(folder: Path, timeout_s: float, run_id: str | None = None) -> dict[int, str]:
    """Wait up to ``timeout_s`` for the run's processes to be gone; returns those still alive."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = processes_of(folder, run_id)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def kill_all(pids: dict[int, str]) -> None:
    """SIGKILL ``pids`` (a failed test's cleanup: it must not leave what it found)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
