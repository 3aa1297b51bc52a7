"""Shared by the storagefs tests: skip (a failure under CI=true) where FUSE cannot be used,
and small probes of the mount table and of processes.

The mounts are real (root and /dev/fuse): nothing in these tests is a fake.
"""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from elastic_chaos.storagefs import StorageFs, unavailable


def require_fuse() -> None:
    """Skip with the reason FUSE cannot be used here; under CI=true that is a failure."""
    reason = unavailable()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"storage mounts cannot be made: {reason} -- the test setup must provide root and /dev/fuse")
    pytest.skip(reason)


def mounted(path: Path) -> bool:
    """Whether ``path`` is a mountpoint in /proc/mounts (without touching the path itself)."""
    return any(line.split()[1] == str(path) for line in Path("/proc/mounts").read_text().splitlines())


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def within(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Whether ``condition`` holds within ``timeout_s`` (polled every 20 ms)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


@contextlib.contextmanager
def storage_mount(folder: Path, workdir: Path) -> Iterator[StorageFs]:
    """A live storage mount over ``folder`` (its daemon's files in ``workdir``), unmounted after the block;
    asserts nothing is left mounted. Skips (fails under CI=true) where FUSE cannot be used."""
    require_fuse()
    storage = StorageFs(folder, workdir=workdir).mount()
    try:
        yield storage
    finally:
        storage.unmount()
    assert not mounted(folder)
