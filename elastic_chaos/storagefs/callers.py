"""Who called an op, and whether that caller is dying, from /proc.

The kernel names a request's caller by its *thread* id; a pause reports the
process (thread group) as well. A caller killed while its op waits in the daemon
cannot die until the op is answered (the kernel waits for a request the daemon
has read without a timeout), so waits poll :func:`dying` and answer EINTR.

Which node of a job a caller belongs to is in its environment: every process of
a node inherits ``ELASTIC_CHAOS_NODE_NAME`` (the local platform sets it; on
Kubernetes it is the pod's name, from the downward API). :func:`node_of` reads
it once per process, so a rule can be scoped to one node of a shared volume.
"""
from __future__ import annotations

import threading
from pathlib import Path

NODE_VAR = "ELASTIC_CHAOS_NODE_NAME"
"""The environment variable that names the job's node a process belongs to."""
_SIGKILL_BIT = 1 << 8
_CACHE_MAX = 4096
_nodes: dict[int, tuple[str, str | None]] = {}
_nodes_lock = threading.Lock()


def tgid(tid: int) -> int | None:
    """The process (thread group) of thread ``tid``; None when it is gone or is the kernel."""
    for line in _status(tid).splitlines():
        if line.startswith("Tgid:"):
            return int(line.split()[1])
    return None


def dying(tid: int) -> bool:
    """Whether thread ``tid`` is gone or has a SIGKILL pending (it dies once its op returns)."""
    if tid == 0:
        return False
    text = _status(tid)
    if not text:
        return True
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("SigPnd", "ShdPnd") and int(value.strip(), 16) & _SIGKILL_BIT:
            return True
        if key == "State" and value.split()[0] in ("Z", "X"):
            return True
    return False


def _status(tid: int) -> str:
    try:
        return Path(f"/proc/{tid}/status").read_text() if tid > 0 else ""
    except OSError:
        return ""


def node_of(pid: int | None) -> str | None:
    """The job's node process ``pid`` belongs to (its ``ELASTIC_CHAOS_NODE_NAME``), or None
    (gone, the kernel, a process of no node). Read once per process: the cache is keyed by
    PID and checked against the process' start time, so a reused PID is read afresh."""
    if pid is None or pid <= 0:
        return None
    started = _start_time(pid)
    if started is None:
        return None
    with _nodes_lock:
        known = _nodes.get(pid)
    if known is not None and known[0] == started:
        return known[1]
    node = _environ_value(pid, NODE_VAR)
    with _nodes_lock:
        if len(_nodes) >= _CACHE_MAX:
            _nodes.clear()
        _nodes[pid] = (started, node)
    return node


def _start_time(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def _environ_value(pid: int, name: str) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    prefix = name.encode() + b"="
    for entry in raw.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode(errors="replace")
    return None
