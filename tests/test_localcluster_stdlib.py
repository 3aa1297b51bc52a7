"""The local cluster's tooling runs as root under a bare system python3 (make cluster-up,
before any venv exists, and inside the nodes' namespaces): importing it must not need a
library the venv installs. CI's make cluster-up failed on exactly that once (elastic_chaos/__init__
imported the runner, which needs tenacity)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import elastic_chaos

REPO = Path(__file__).resolve().parent.parent
THIRD_PARTY = ("tenacity", "etcd", "torch", "kubernetes", "boto3", "botocore", "urllib3", "yaml",
               "prometheus_client", "pytest", "numpy")
MODULES = ("elastic_chaos.localcluster", "elastic_chaos.localcluster.cli",
           "elastic_chaos.localcluster.node")


def test_the_local_cluster_imports_with_the_standard_library_alone():
    # None in sys.modules makes any import of that name fail, as on a python without it
    block = "; ".join(f"sys.modules[{name!r}] = None" for name in THIRD_PARTY)
    code = f"import sys, importlib; {block}; [importlib.import_module(m) for m in {MODULES!r}]"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_the_package_front_still_offers_its_public_names():
    for name in elastic_chaos.__all__:
        assert getattr(elastic_chaos, name) is not None, name


def test_status_says_no_cluster_with_its_own_exit_code(tmp_path, monkeypatch):
    """make cluster-test brings a cluster up unless status exits 0: "cluster down" exiting 0 made it
    run the whole catalog against no cluster."""
    from elastic_chaos.localcluster import status as st
    from elastic_chaos.localcluster.base import Layout
    monkeypatch.setattr(st, "collect", lambda layout: {"up": False, "nodes": {}, "components": {}})
    assert st.status(Layout(tmp_path)) == st.STATUS_DOWN == 3
    assert st.status(Layout(tmp_path), as_json=True) == 3


def test_a_cluster_folder_too_deep_for_containerds_sockets_is_refused_before_anything_starts():
    """A CI clone under /tmp kept its cluster in /var/cache/elastic-chaos/cluster-<12 hex>: the
    template containerd's socket path was over 104 bytes and cluster up failed after the image build."""
    from elastic_chaos.localcluster.base import Layout
    from elastic_chaos.localcluster.deps import socket_depth_error
    assert socket_depth_error(Layout(Path("/var/cache/ec-119f44f2"))) is None
    reason = socket_depth_error(Layout(Path("/var/cache/elastic-chaos/cluster-119f44f2bea8"))) or ""
    assert "too deep" in reason and "ELASTIC_CHAOS_CLUSTER_DIR" in reason


def test_a_failed_cluster_up_removes_what_it_started_and_keeps_its_logs(tmp_path, monkeypatch):
    """A CI run whose cluster up failed (the template's containerd could not open its socket) left
    etcd and the control plane running: up now stops what it started, the logs kept under build/."""
    from elastic_chaos.localcluster import cli, ops
    from elastic_chaos.localcluster.base import ClusterError, Layout
    layout = Layout(tmp_path)
    (layout.logs).mkdir(parents=True)
    (layout.logs / "template-containerd.log").write_text("unix socket path too long\n")
    calls: list[str] = []

    def failing_up(*a, **k):
        raise ClusterError("the template containerd did not open its socket")
    monkeypatch.setattr(ops, "up", failing_up)
    monkeypatch.setattr(ops, "down", lambda lay: calls.append("down"))
    monkeypatch.setattr(cli, "Layout", lambda: layout)
    assert cli.main(["up"]) == 1
    assert calls == ["down"]
    assert (layout.build / "failed-up-logs" / "template-containerd.log").read_text() == "unix socket path too long\n"


def test_a_refused_cluster_up_touches_nothing(tmp_path, monkeypatch):
    from elastic_chaos.localcluster import cli, ops
    from elastic_chaos.localcluster.base import Layout, SetupError
    calls: list[str] = []

    def refused(*a, **k):
        raise SetupError("not root")
    monkeypatch.setattr(ops, "up", refused)
    monkeypatch.setattr(ops, "down", lambda lay: calls.append("down"))
    monkeypatch.setattr(cli, "Layout", lambda: Layout(tmp_path))
    assert cli.main(["up"]) == 2 and calls == []
