"""A rule scoped to one node of a job touches only that node's processes, and the op log
names the node of each writer (its ELASTIC_CHAOS_NODE_NAME).

Real FUSE mounts and real writer processes (root and /dev/fuse; skipped with the reason
elsewhere, a failure under CI=true).
"""
from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from storagefs_helpers import require_fuse

from elastic_chaos.storagefs import CrashPoint, ReadOnly, SavePoint, StorageFs, saves
from elastic_chaos.storagefs.callers import NODE_VAR, node_of

WRITE = """
import os, sys
path = sys.argv[1]
try:
    with open(path, "wb") as f:
        f.write(b"x" * 4096)
        f.flush()
        os.fsync(f.fileno())
except OSError as exc:
    sys.exit(exc.errno)
"""


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[StorageFs]:
    require_fuse()
    folder = tmp_path / "ckpt"
    folder.mkdir()
    storage = StorageFs(folder, workdir=tmp_path / "storage").mount()
    try:
        yield storage
    finally:
        storage.unmount()


def write_as(node: str | None, path: Path, *, wait: bool = True) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != NODE_VAR}
    if node is not None:
        env[NODE_VAR] = node
    proc = subprocess.Popen([sys.executable, "-c", WRITE, str(path)], env=env)
    if wait:
        proc.wait(30)
    return proc


def test_a_rule_for_one_node_fails_its_writes_and_spares_the_others(fs):
    fs.set_rule(ReadOnly(), name="ro", node="node-1")
    assert write_as("node-1", fs.mountpoint / "a").returncode == errno.EROFS
    assert write_as("node-0", fs.mountpoint / "b").returncode == 0
    assert write_as(None, fs.mountpoint / "c").returncode == 0
    fs.clear_rule("ro")
    assert write_as("node-1", fs.mountpoint / "d").returncode == 0


def test_the_op_log_and_a_pause_name_the_writers_node(fs):
    write_as("node-3", fs.mountpoint / "a")
    assert [s.node for s in saves(fs.ops())] == ["node-3"]
    fs.set_rule(CrashPoint(SavePoint.BEFORE_FSYNC), name="aim", node="node-2")
    write_as("node-1", fs.mountpoint / "b")          # not its node: goes through
    writer = write_as("node-2", fs.mountpoint / "c", wait=False)
    try:
        paused = fs.wait_pause(timeout_s=20)
        assert (paused.node, paused.pid) == ("node-2", writer.pid)
    finally:
        fs.release()
        writer.wait(30)


def test_node_of_reads_a_process_environment_and_none_for_a_process_of_no_node():
    # asked once it runs (a caller of the mount is past its exec: its environment is in place)
    child = subprocess.Popen([sys.executable, "-c", "import time; print(flush=True); time.sleep(30)"],
                             env={**os.environ, NODE_VAR: "node-7"}, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"\n"
        assert node_of(child.pid) == "node-7"
    finally:
        child.kill()
        child.communicate()
    assert node_of(child.pid) is None
    assert node_of(os.getpid()) == os.environ.get(NODE_VAR)
