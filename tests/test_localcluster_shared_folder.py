"""The local cluster's shared checkpoint folder is a mount with shared propagation from before its
nodes start, so a mount made under it later (the storage layer) reaches a copy of the mount table
made before (a node's); `down` unmounts it and what is under it. Real mounts (root)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from elastic_chaos.localcluster.base import Layout
from elastic_chaos.localcluster.ops import (
    is_mountpoint,
    share_checkpoint_folder,
    unshare_checkpoint_folder,
)
from elastic_chaos.platforms.kubernetes.platform import shared_mount

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")


def test_a_mount_made_under_the_shared_folder_later_reaches_a_namespace_copied_before(tmp_path):
    layout = Layout(tmp_path / "cluster")
    state: dict[str, object] = {"procs": {}, "nodes": {}}
    share_checkpoint_folder(layout, state)
    node = None
    try:
        assert state["shared_mount"] == str(layout.shared) and shared_mount(str(layout.shared))
        # a "node": a mount namespace copied now, as `unshare --mount --propagation slave` makes one
        node = subprocess.Popen(["unshare", "--mount", "--propagation", "slave", "--", "sh", "-c",
                                 "read go; cat /proc/self/mountinfo"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
        run = layout.shared / "chaos-1"
        run.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "later", str(run)], check=True)   # made after the copy
        seen, _ = node.communicate("go\n", timeout=30)
        assert any(line.split()[4] == str(run) for line in seen.splitlines())
    finally:
        if node is not None and node.poll() is None:
            node.kill()
        unshare_checkpoint_folder(state)
    assert not is_mountpoint(str(layout.shared)) and not is_mountpoint(str(layout.shared / "chaos-1"))


def test_a_folder_that_is_no_mount_is_not_shared_and_down_leaves_it(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    assert not shared_mount(str(folder))
    unshare_checkpoint_folder({"shared_mount": str(folder)})
    assert folder.is_dir() and not is_mountpoint(str(Path(folder)))
