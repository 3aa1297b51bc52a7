"""Who called an op, and whether that caller is dying, from /proc.

The kernel names a request's caller by its *thread* id; a pause reports the
process (thread group) as well. A caller killed while its op waits in the daemon
cannot die until the op is answered (the kernel waits for a request the daemon
has read without a timeout), so waits poll :func:`dying` and answer EINTR.
"""
from __future__ import annotations

from pathlib import Path

_SIGKILL_BIT = 1 << 8


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
