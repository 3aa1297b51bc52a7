"""Find and signal every process of a local node, including escaped ones.

torchrun starts its workers in new sessions, so a node is not a process group:
killing the agent or its group leaves orphan workers training (reparented to
init). Every process a node starts inherits an environment tag
(``ELASTIC_CHAOS_NODE=<run>/<node>``), and ``/proc/<pid>/environ`` shows it
whoever the parent is now. A kill stops the whole set first (SIGSTOP, so
nothing can fork or react), rescans until the set is closed, and only then
sends SIGKILL: no process of the node escapes, and none gets to run after
its peers are gone.
"""
from __future__ import annotations

import os
import signal
from pathlib import Path

from chaos.waiting import eventually

TAG_VAR = "ELASTIC_CHAOS_NODE"


def tag_entry(tag: str) -> bytes:
    return f"{TAG_VAR}={tag}".encode()


def tagged_pids(tag: str) -> set[int]:
    """PIDs of live processes whose environment carries ``tag`` (zombies excluded)."""
    needle = tag_entry(tag)
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except (OSError, ProcessLookupError):
            continue  # gone, a zombie, or not ours to read
        if needle in environ.split(b"\0"):
            found.add(int(entry.name))
    return found


def _signal_all(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def stop_tree(tag: str, *, first: int | None = None, max_rounds: int = 50) -> set[int]:
    """SIGSTOP every process of the node until no new one appears; returns the set.

    ``first`` (the agent) is stopped before the scan so it cannot spawn more.
    """
    stopped: set[int] = set()
    if first is not None:
        _signal_all({first}, signal.SIGSTOP)
        stopped.add(first)
    for _ in range(max_rounds):
        new = tagged_pids(tag) - stopped
        if not new:
            break
        _signal_all(new, signal.SIGSTOP)
        stopped |= new
    return stopped


def kill_tree(tag: str, *, first: int | None = None, timeout_s: float = 10.0) -> set[int]:
    """Hard-kill every process of the node; blocks until none is alive. Returns the PIDs hit.

    Idempotent: a node with no live process returns an empty set.
    """
    hit = stop_tree(tag, first=first)
    _signal_all(hit, signal.SIGKILL)

    def all_gone() -> bool:
        alive = tagged_pids(tag)
        _signal_all(alive, signal.SIGKILL)   # a child forked meanwhile gets its SIGKILL too
        hit.update(alive)
        return not alive

    if not eventually(all_gone, timeout_s=timeout_s, interval_s=0.02):
        raise TimeoutError(f"processes of node {tag} still alive after SIGKILL: {sorted(tagged_pids(tag))}")
    return hit


def signal_tree(tag: str, sig: int) -> set[int]:
    """Send ``sig`` to every live process of the node (SIGSTOP/SIGCONT for freeze/thaw)."""
    pids = tagged_pids(tag)
    _signal_all(pids, sig)
    return pids


def _environ(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def _ppid(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("PPid:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def worker_pid(tag: str, agent_pid: int, local_rank: int) -> int | None:
    """The node's worker process with ``LOCAL_RANK=local_rank``: a direct child of the
    agent (its own helpers, e.g. data-loader processes, are grandchildren)."""
    want = f"LOCAL_RANK={local_rank}".encode()
    for pid in sorted(tagged_pids(tag)):
        if _ppid(pid) == agent_pid and want in _environ(pid):
            return pid
    return None


def is_running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, dead but not yet reaped, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
