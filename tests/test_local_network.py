"""Where the local platform puts a job's traffic and listeners (issue 15, finding 7).

On host networking every node gets ``--local-addr 127.0.0.1`` (the workers' MASTER_ADDR,
where the trainer binds its store) and gloo/NCCL on ``lo``. The c10d rendezvous store,
which torch binds to every interface, is why c10d nodes run in network namespaces by
default as root, and why the platform says so when they cannot.
"""
from __future__ import annotations

import pytest

from elastic_chaos.events import RunnerEv, Timeline
from elastic_chaos.host import netns
from elastic_chaos.platforms.local.agent import agent_command
from elastic_chaos.platforms.local.c10d_store import exposed_listeners
from elastic_chaos.platforms.local.guard import RunGuard
from elastic_chaos.platforms.local.platform import LocalOptions, LocalPlatform, NetworkMode
from elastic_chaos.spec import JobSpec, RdzvBackend, RendezvousSpec

C10D = JobSpec(nodes="1:2", rdzv=RendezvousSpec(backend=RdzvBackend.C10D))
ETCD = JobSpec(nodes="1:2")


def platform(tmp_path, **options) -> LocalPlatform:
    return LocalPlatform(Timeline(), tmp_path, LocalOptions(**options))


def test_auto_keeps_etcd_jobs_on_the_host_network(tmp_path):
    assert platform(tmp_path).network_mode(ETCD) is NetworkMode.HOST


def test_auto_puts_c10d_nodes_in_namespaces_where_it_can(tmp_path):
    expected = NetworkMode.HOST if netns.unavailable_reason() else NetworkMode.ISOLATED
    assert platform(tmp_path).network_mode(C10D) is expected


@pytest.mark.parametrize("mode", [NetworkMode.HOST, NetworkMode.ISOLATED])
def test_an_explicit_network_is_kept(tmp_path, mode):
    assert platform(tmp_path, network=mode).network_mode(C10D) is mode


def test_c10d_on_the_host_network_is_said_to_listen_on_every_interface():
    (said,) = exposed_listeners(C10D, NetworkMode.HOST)
    assert "every interface" in said and "no option" in said
    assert exposed_listeners(C10D, NetworkMode.ISOLATED) == []
    assert exposed_listeners(ETCD, NetworkMode.HOST) == []


def test_nodes_on_the_host_network_use_loopback(tmp_path):
    p = platform(tmp_path, network=NetworkMode.HOST)
    p._c10d_port = 29400
    cmd = agent_command(C10D, python="python", endpoint=p.rdzv_endpoint(C10D), address="127.0.0.1", store_host=True,
                        script=(), checkpoint_dir=tmp_path, log_dir=tmp_path / "agent")
    assert cmd[cmd.index("--local-addr") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--rdzv-endpoint") + 1] == "127.0.0.1:29400"
    assert "is_host=1" in cmd[cmd.index("--rdzv-conf") + 1]
    assert p.interface_env(C10D) == {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}


def test_the_jobs_own_interface_setting_wins(tmp_path):
    job = JobSpec(nodes="1:2", env=(("NCCL_SOCKET_IFNAME", "ib0"),))
    assert platform(tmp_path).interface_env(job) == {"GLOO_SOCKET_IFNAME": "lo"}


def test_the_isolation_event_names_what_torch_leaves_on_every_interface(tmp_path, monkeypatch):
    monkeypatch.setattr(netns, "unavailable_reason", lambda: "no root here")     # c10d stays on the host
    timeline = Timeline()
    p = LocalPlatform(timeline, tmp_path, LocalOptions(use_cgroups=False, state_dir=tmp_path / "state"))
    p.guard = RunGuard(timeline, tmp_path, C10D.run_id, tmp_path / "state")
    p._setup_isolation(C10D)
    (ev,) = timeline.select(RunnerEv.ISOLATION)
    assert ev.data.network == "host" and "every interface" in ev.data.exposed[0]
