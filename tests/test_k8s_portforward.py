"""The etcd port-forward: kubectl's command line, its announced port, stop by PID.

kubectl port-forward needs a kubelet to forward to, which these machines lack;
a stand-in script prints what kubectl prints and waits, so this tests our side
only (parsing, errors, process handling), and says so.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from elastic_chaos.errors import PlatformError
from elastic_chaos.platforms.kubernetes.portforward import PortForward


def stand_in(tmp_path: Path, body: str) -> str:
    script = tmp_path / "kubectl"
    script.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/args\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_the_announced_local_port_is_the_endpoint_and_stop_ends_kubectl_by_pid(tmp_path):
    kubectl = stand_in(tmp_path, "echo 'Forwarding from 127.0.0.1:40123 -> 2379'\nexec sleep 60")
    pf = PortForward(kubectl, "training", "svc/run-etcd", 2379, kubeconfig="/k/config", context="prod")
    pf.start()
    pid = pf._proc.pid
    assert pf.endpoint == "127.0.0.1:40123"
    assert (tmp_path / "args").read_text().split() == [
        "--kubeconfig", "/k/config", "--context", "prod", "-n", "training", "port-forward",
        "--address", "127.0.0.1", "svc/run-etcd", ":2379"]
    log = pf.log_path
    assert log is not None and log.exists()
    pf.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not log.exists()                                       # the temp log it made goes with it
    pf.stop()                                                     # idempotent


def test_a_log_path_given_is_the_callers_and_is_kept(tmp_path):
    kubectl = stand_in(tmp_path, "echo 'Forwarding from 127.0.0.1:40124 -> 2379'\nexec sleep 60")
    pf = PortForward(kubectl, "training", "svc/run-etcd", 2379, log_path=tmp_path / "pf.log")
    pf.start()
    pf.stop()
    assert "Forwarding from 127.0.0.1:40124" in (tmp_path / "pf.log").read_text()


def test_a_failing_port_forward_says_what_kubectl_said(tmp_path):
    kubectl = stand_in(tmp_path, "echo 'error: services \"run-etcd\" not found' >&2; exit 1")
    pf = PortForward(kubectl, "training", "svc/run-etcd", 2379)
    with pytest.raises(PlatformError, match='did not start: error: services "run-etcd" not found'):
        pf.start()
    assert pf.log_path is None   # its temp log was removed: what kubectl said is in the error


def test_no_kubectl_names_the_alternative(tmp_path):
    with pytest.raises(PlatformError, match="pass etcd_endpoint"):
        PortForward(str(tmp_path / "nope"), "ns", "svc/x", 2379).start()
