"""Hold the rendezvous store to a share of one core: the other half of time dilation (bench.rdzv.clock).

Under a time dilation ``d`` every agent perceives ``d`` times the CPU per second; the store must not. On
a real cluster the c10d store is one libuv thread on the first agent's host (and etcd a small server): its
CPU per *perceived* second is what it has. So the store process goes into a cgroup of its own whose CPU
quota is ``1/d`` of one core, with a period of ``d`` ms -- the store runs at most 1 ms of every ``d`` ms,
which in perceived time is one core with at most a millisecond's wait.

Needs a writable cgroup CPU controller (root; v1 ``/sys/fs/cgroup/cpu`` or v2 with ``cpu`` enabled);
:func:`available` says whether there is one and, if not, why. The cgroup is named after the process that
made it (``elastic-chaos-scale-PID-TAG``) and removed by :meth:`CpuQuota.remove` once the store has exited. A
maker killed before that (SIGKILL) leaves it behind, empty (the store dies with its harness): the next
CpuQuota removes such leftovers -- ours by name, their maker gone, no process in them; nothing else.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

V1 = Path("/sys/fs/cgroup/cpu")
V2 = Path("/sys/fs/cgroup")
PERIOD_PER_DILATION_US = 1000
"""The quota's period is this many microseconds per unit of dilation: 1 ms of CPU in every d ms."""


def _root() -> tuple[Path, int] | None:
    if (V1 / "cpu.cfs_quota_us").exists() and os.access(V1, os.W_OK):
        return V1, 1
    controllers = V2 / "cgroup.subtree_control"
    if controllers.exists() and "cpu" in controllers.read_text().split() and os.access(V2, os.W_OK):
        return V2, 2
    return None


def available() -> str | None:
    """None when a store can be throttled here; else why not (for the report)."""
    if _root() is None:
        return ("no writable cgroup CPU controller (needs root, and /sys/fs/cgroup/cpu or cgroup v2 with the "
                "cpu controller enabled)")
    return None


PREFIX = "elastic-chaos-scale-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_stale(base: Path) -> list[Path]:
    """Remove the cgroups under ``base`` a killed maker left: named PREFIX + PID-..., that PID gone, empty (an
    rmdir refuses a cgroup with a process in it). Returns those removed."""
    gone = []
    for path in base.glob(f"{PREFIX}*"):
        pid = path.name[len(PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            path.rmdir()
        except OSError:  # a process still in it, or it went meanwhile: not ours to force
            continue
        gone.append(path)
    return gone


class CpuQuota:
    """A cgroup holding processes to ``1/dilation`` of one core; ``add`` a PID, ``remove`` when it has exited."""

    def __init__(self, dilation: float, tag: str = "quota") -> None:
        root = _root()
        if root is None:
            raise OSError(available())
        base, version = root
        reap_stale(base)
        self.path = base / f"{PREFIX}{os.getpid()}-{tag}"
        self.path.mkdir(exist_ok=True)
        period = max(1000, min(1_000_000, round(PERIOD_PER_DILATION_US * dilation)))
        quota = max(1000, round(period / dilation))
        if version == 1:
            (self.path / "cpu.cfs_period_us").write_text(str(period))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota))
        else:
            (self.path / "cpu.max").write_text(f"{quota} {period}")
        self.share = quota / period
        """The share of one core the store gets in real time (1/dilation, rounded to the kernel's 1 ms floor)."""

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def throttled_s(self) -> float:
        """Real seconds the store wanted a CPU and its quota said no (cpu.stat), for the record."""
        stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines() if " " in line)
        if "throttled_time" in stat:
            return int(stat["throttled_time"]) / 1e9
        return int(stat.get("throttled_usec", 0)) / 1e6

    def remove(self, timeout_s: float = 5.0) -> None:
        """Remove the cgroup once its processes have exited (bounded wait); idempotent."""
        deadline = time.monotonic() + timeout_s
        while self.path.exists():
            try:
                self.path.rmdir()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
