"""Fixtures of the ``k8s_api`` tests: one real kube-apiserver per session, a namespace
and a simulated set of machines per test.

Without the built binary these tests skip with "run make k8s-testenv"; with
CI=true they fail instead (CI builds it first, in .ci/run).
"""
from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from crd_util import CRD_DIR, install_crds
from k8s_sim import ClusterSim, LogEndpoint, LogStore
from k8s_testenv import ApiServer, api_client, find_binary, openssl_available

SPOT_TAINT = {"key": "elastic-chaos/spot", "value": "true", "effect": "NoSchedule"}


@pytest.fixture(scope="session")
def k8s_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A real kube-apiserver (+ etcd) on 127.0.0.1 for the whole session, stopped by PID."""
    binary = find_binary()
    if binary is None or not openssl_available():
        reason = ("no kube-apiserver built for the k8s_api tests: run `make k8s-testenv` "
                  "(builds it once into .k8s-testenv/, ~5 min)" if binary is None else
                  "the k8s_api tests generate their certificates with openssl: apt-get install openssl")
        if os.environ.get("CI") == "true":
            pytest.fail(reason + " -- CI must build it before `make test` (.ci/run does)")
        pytest.skip(reason)
    server = ApiServer(tmp_path_factory.mktemp("kube-apiserver"), binary)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def admin(k8s_api: ApiServer) -> Any:
    """An ApiClient with cluster-admin rights (system:masters), built from a kubeconfig file."""
    return api_client(k8s_api, "admin")


@pytest.fixture(scope="session")
def core(admin: Any) -> Any:
    from kubernetes import client
    return client.CoreV1Api(admin)


@pytest.fixture(scope="session")
def custom(admin: Any) -> Any:
    from kubernetes import client
    return client.CustomObjectsApi(admin)


@pytest.fixture(scope="session")
def crds_installed(admin: Any) -> list[str]:
    """The CRDs kind/ ships, installed once and Established."""
    return install_crds(admin, sorted(CRD_DIR.glob("*.yaml")))


@pytest.fixture(scope="session")
def log_endpoint(k8s_api: ApiServer) -> Iterator[LogEndpoint]:
    """The kubelet's log endpoint stand-in (loopback HTTPS), shared by the session."""
    endpoint = LogEndpoint(LogStore(), k8s_api.work_dir / "pki").start()
    yield endpoint
    endpoint.stop()


@pytest.fixture
def namespace(core: Any) -> Iterator[str]:
    """A fresh namespace per test (deletion stays pending: there is no namespace controller)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                          _preload_content=False)
    yield name
    try:
        core.delete_namespace(name, _preload_content=False)
    except Exception:  # noqa: BLE001 - best effort
        pass


@pytest.fixture
def sim(core: Any, custom: Any, namespace: str, log_endpoint: LogEndpoint,
        crds_installed: list[str]) -> Iterator[ClusterSim]:
    """Controller + scheduler + kubelet for this test's namespace, with four machines like
    kind/cluster.yaml's workers: one on-demand, three spot (tainted)."""
    from kubernetes import client
    sim = ClusterSim(core, custom, namespace, log_endpoint.store, log_endpoint.port,
                     apps=client.AppsV1Api(core.api_client))
    sim.add_machine(f"{namespace}-ondemand", capacity="ON_DEMAND")
    for i in range(3):
        sim.add_machine(f"{namespace}-spot-{i}", capacity="SPOT", taints=[SPOT_TAINT])
    sim.start()
    yield sim
    sim.stop()
    sim.delete_machines()


@pytest.fixture(scope="session")
def job_etcd(tmp_path_factory: pytest.TempPathFactory, k8s_api: ApiServer) -> Iterator[Any]:
    """The etcd a job's rendezvous would use (the etcd pod cannot run here: a local one)."""
    from elastic_chaos.host.etcd import EtcdServer
    server = EtcdServer(tmp_path_factory.mktemp("job-etcd") / "data")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def make_platform(admin: Any, namespace: str, sim: ClusterSim, job_etcd: Any,
                  tmp_path: Path) -> Iterator[Any]:
    """Build a KubernetesPlatform on this test's namespace with injected clients
    (``user`` picks whose credentials; ``kind=True`` builds a KindPlatform)."""
    from kubernetes import client

    from elastic_chaos.events import Timeline
    from elastic_chaos.platforms.kubernetes import manifests as m
    from elastic_chaos.platforms.kubernetes.kind_cluster import KindOptions, KindPlatform
    from elastic_chaos.platforms.kubernetes.options import KubernetesOptions
    from elastic_chaos.platforms.kubernetes.platform import KubernetesPlatform
    made: list[Any] = []

    def make(*, job_kind: m.JobKind = m.JobKind.ELASTICJOB, api: Any = None, kind: bool = False,
             docker: str = "docker", **settings: Any) -> Any:
        api = api or admin
        clients = {"core_v1": client.CoreV1Api(api), "apps_v1": client.AppsV1Api(api),
                   "custom_objects": client.CustomObjectsApi(api), "policy_v1": client.PolicyV1Api(api)}
        kube = m.kind_settings(namespace=namespace, job_kind=job_kind, **settings)
        timeline = Timeline(tmp_path / f"timeline-{len(made)}.jsonl")
        work = tmp_path / f"run-{len(made)}"
        common = {"settings": kube, "etcd_endpoint": job_etcd.endpoint, "start_timeout_s": 30.0,
                  "stop_timeout_s": 15.0, "watch_window_s": 5}
        if kind:
            platform = KindPlatform(timeline, work, KindOptions(docker=docker, **common), **clients)
        else:
            platform = KubernetesPlatform(timeline, work, KubernetesOptions(**common), **clients)
        made.append(platform)
        return platform

    yield make
    for platform in made:
        try:
            platform.stop()
        finally:
            platform.timeline.close()
