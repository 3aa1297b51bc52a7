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
from collections.abc import Callable, Iterator
from pathlib import Path

from elastic_chaos.waiting import eventually

TAG_VAR = "ELASTIC_CHAOS_NODE"
"""``<run>/<node>`` on every process of a node; ``<run>/etcd`` on the run's etcd."""


def tag_entry(tag: str) -> bytes:
    return f"{TAG_VAR}={tag}".encode()


def _environ_entries() -> Iterator[tuple[int, list[bytes]]]:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except (OSError, ProcessLookupError):
            continue  # gone, a zombie, or not ours to read
        yield int(entry.name), environ.split(b"\0")


def tagged_pids(tag: str) -> set[int]:
    """PIDs of live processes whose environment carries ``tag`` (zombies excluded)."""
    needle = tag_entry(tag)
    return {pid for pid, entries in _environ_entries() if needle in entries}


def run_pids(run_id: str, *, started_after: int = 0) -> dict[int, str]:
    """Every live process tagged as part of run ``run_id`` (its nodes and its etcd) that
    started at or after ``started_after`` (clock ticks since boot, as :func:`start_time`),
    mapped to its tag. A process that is gone by the time it is checked is left out."""
    prefix = tag_entry(run_id + "/")
    found: dict[int, str] = {}
    for pid, entries in _environ_entries():
        tag = next((e for e in entries if e.startswith(prefix)), None)
        if tag is None or not is_running(pid):
            continue
        started = start_time(pid)
        if started is not None and started >= started_after:
            found[pid] = tag.decode(errors="replace").partition("=")[2]
    return found


def start_time(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (/proc/PID/stat field 22): with the
    PID, an identity no later process can share. None when it is gone."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def group_of(pid: int) -> int | None:
    """The process group of ``pid`` (None when it is gone)."""
    fields = _stat(pid)
    return int(fields[2]) if fields else None


def group_members(pgid: int) -> set[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    members = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields and fields[0] != "Z" and int(fields[2]) == pgid:
                members.add(int(entry.name))
    return members


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name: state, ppid, pgrp, ... (field 3 onwards)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def is_stopped(pid: int) -> bool:
    """The kernel shows ``pid`` stopped by a signal (state T, or t when traced)."""
    stat = _stat(pid)
    return stat is not None and stat[0] in ("T", "t")


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
    return _stop_all(lambda: tagged_pids(tag), first=first, max_rounds=max_rounds)


def _stop_all(find: Callable[[], set[int]], *, first: int | None = None, max_rounds: int = 50) -> set[int]:
    stopped: set[int] = set()
    if first is not None:
        _signal_all({first}, signal.SIGSTOP)
        stopped.add(first)
    for _ in range(max_rounds):
        new = find() - stopped
        if not new:
            break
        _signal_all(new, signal.SIGSTOP)
        stopped |= new
    return stopped


def kill_tree(tag: str, *, first: int | None = None, timeout_s: float = 10.0) -> set[int]:
    """Hard-kill every process of the node; blocks until none is alive. Returns the PIDs hit.

    Idempotent: a node with no live process returns an empty set.
    """
    return _kill_all(lambda: tagged_pids(tag), f"node {tag}", first=first, timeout_s=timeout_s)


def kill_run(run_id: str, *, started_after: int = 0, timeout_s: float = 10.0) -> dict[int, str]:
    """Hard-kill every process tagged as part of run ``run_id`` that started at or after
    ``started_after`` (what a runner that is gone left: its etcd, its nodes); blocks until
    none is alive. Returns the PIDs hit with their tags. Idempotent."""
    seen: dict[int, str] = {}

    def find() -> set[int]:
        found = run_pids(run_id, started_after=started_after)
        seen.update(found)
        return set(found)

    hit = _kill_all(find, f"run {run_id}", timeout_s=timeout_s)
    return {pid: seen[pid] for pid in hit if pid in seen}


def _kill_all(find: Callable[[], set[int]], what: str, *, first: int | None = None,
              timeout_s: float = 10.0) -> set[int]:
    hit = _stop_all(find, first=first)
    _signal_all(hit, signal.SIGKILL)

    def all_gone() -> bool:
        alive = find()
        _signal_all(alive, signal.SIGKILL)   # a child forked meanwhile gets its SIGKILL too
        hit.update(alive)
        return not alive

    if not eventually(all_gone, timeout_s=timeout_s, interval_s=0.02):
        raise TimeoutError(f"processes of {what} still alive after SIGKILL: {sorted(find())}")
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


def is_running(pid: int, started: int | None = None) -> bool:
    """Whether ``pid`` is a live process (a zombie, dead but not yet reaped, is not) and,
    given ``started`` (:func:`start_time`), still the same process and not a reused PID."""
    fields = _stat(pid)
    if not fields or fields[0] == "Z":
        return False
    return started is None or int(fields[19]) == started
