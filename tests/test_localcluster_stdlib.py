"""The local cluster's tooling runs as root under a bare system python3 (make cluster-up,
before any venv exists, and inside the nodes' namespaces): importing it must not need a
library the venv installs. CI's make cluster-up failed on exactly that once (chaos/__init__
imported the runner, which needs tenacity)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
THIRD_PARTY = ("tenacity", "etcd", "torch", "kubernetes", "boto3", "botocore", "urllib3", "yaml",
               "prometheus_client", "pytest", "numpy")
MODULES = ("chaos.platforms.kubernetes.localcluster", "chaos.platforms.kubernetes.localcluster.cli",
           "chaos.platforms.kubernetes.localcluster.node")


def test_the_local_cluster_imports_with_the_standard_library_alone():
    # None in sys.modules makes any import of that name fail, as on a python without it
    block = "; ".join(f"sys.modules[{name!r}] = None" for name in THIRD_PARTY)
    code = f"import sys, importlib; {block}; [importlib.import_module(m) for m in {MODULES!r}]"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_the_package_front_still_offers_its_public_names():
    import chaos
    for name in chaos.__all__:
        assert getattr(chaos, name) is not None, name


def test_status_says_no_cluster_with_its_own_exit_code(tmp_path, monkeypatch):
    """make cluster-test brings a cluster up unless status exits 0: "cluster down" exiting 0 made it
    run the whole catalog against no cluster."""
    from chaos.platforms.kubernetes.localcluster import status as st
    from chaos.platforms.kubernetes.localcluster.base import Layout
    monkeypatch.setattr(st, "collect", lambda layout: {"up": False, "nodes": {}, "components": {}})
    assert st.status(Layout(tmp_path)) == st.STATUS_DOWN == 3
    assert st.status(Layout(tmp_path), as_json=True) == 3
