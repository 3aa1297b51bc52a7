"""A node's disk with the images already in it: the local stand-in for a cloud's machine image.

Importing the 1 GB trainer image into a node's containerd takes 17-23 s (a copy
into the content store, then an unpack into overlayfs snapshots), 45 s when
three nodes import at once on 2 cores. So the images are imported once into a
template containerd root, cached under ``.cluster/build/node-template/KEY``
(KEY: the image references and containerd's version), and each new node's
containerd root is a hard-linked copy of it (``cp -al``, about a second),
with private copies of the two bolt databases containerd writes in place.
Content blobs and committed snapshots are never written in place (overlayfs
copies up into each container's own upper dir), so the links are safe.

The template is made by a containerd in its own mount and PID namespace (its
unpack mounts never reach the host; one kill ends it), recorded in the state
as ``template-containerd`` while it runs.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from elastic_chaos.localcluster.base import ClusterError, Layout, is_alive, run, save_state, spawn, stop
from elastic_chaos.localcluster.node import CNI_BIN, CONTAINERD_TOML

WRITTEN_IN_PLACE = ("io.containerd.metadata.v1.bolt/meta.db", "io.containerd.snapshotter.v1.overlayfs/metadata.db")
IMAGE_TARS = ("pause.tar", "trainer.tar")


def template_key(layout: Layout) -> str:
    """Changes when an image or containerd changes."""
    h = hashlib.sha256()
    for name in ("pause.ref", "trainer.ref"):
        h.update((layout.images / name).read_bytes())
    h.update(run(["containerd", "--version"]).encode())
    return h.hexdigest()[:16]


def template_root(layout: Layout) -> Path:
    return layout.build / "node-template" / template_key(layout) / "root"


def ensure_template(layout: Layout, state: dict[str, Any]) -> Path:
    """The template root for the current images, made (about 20 s) when missing. Idempotent."""
    root = template_root(layout)
    if (root.parent / "complete").exists():
        return root
    for old in (layout.build / "node-template").glob("*"):
        shutil.rmtree(old, ignore_errors=True)
    work = root.parent
    (work / "cni").mkdir(parents=True, exist_ok=True)
    (work / "containerd.toml").write_text(CONTAINERD_TOML.format(
        d=work, sandbox=(layout.images / "pause.ref").read_text().strip(), cni=CNI_BIN)
        .replace(f'root = "{work}/containerd/root"', f'root = "{root}"')
        .replace(f'conf_dir = "{work}/cni/net.d"', f'conf_dir = "{work}/cni"'))
    args = ["unshare", "--pid", "--fork", "--mount-proc", "--mount", "--propagation", "private", "--kill-child",
            "--", "containerd", "--config", str(work / "containerd.toml")]
    _, rec = spawn(args, layout.logs / "template-containerd.log")
    state["procs"]["template-containerd"] = rec
    save_state(layout, state)
    try:
        _import(work / "containerd" / "containerd.sock", layout, rec)
    finally:
        stop(rec, grace_s=10)
        del state["procs"]["template-containerd"]
        save_state(layout, state)
    shutil.rmtree(work / "containerd", ignore_errors=True)
    (work / "complete").write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
    return root


def _import(sock: Path, layout: Layout, rec: dict[str, Any]) -> None:
    deadline = time.monotonic() + 30
    while not sock.exists():
        if time.monotonic() > deadline or not is_alive(rec):
            raise ClusterError(f"the template containerd did not open {sock}: see {rec['log']}")
        time.sleep(0.1)
    for tar in IMAGE_TARS:
        run(["ctr", "--address", str(sock), "-n", "k8s.io", "images", "import", str(layout.images / tar)],
            timeout_s=600)


def clone(template: Path, dest: Path) -> None:
    """``dest`` becomes a containerd root with the template's images: hard links, private databases."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(template), str(dest)], check=True, timeout=120)
    for rel in WRITTEN_IN_PLACE:
        target = dest / rel
        target.unlink()
        shutil.copy2(template / rel, target)
