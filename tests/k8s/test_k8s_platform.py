"""The Kubernetes platform against a real API server: start, watch, follow logs, stop.

The controller, scheduler and kubelet are played by tests/k8s/k8s_sim.py (they
cannot run here); everything the platform does goes through the real server.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from k8s_testenv import until

from elastic_chaos.errors import InjectionFailed, PlatformError
from elastic_chaos.events import NodeEv, ProgressEv, RdzvEv, Source, field_value
from elastic_chaos.platforms.api import NodeState
from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.spec import JobSpec, RdzvBackend, RendezvousSpec
from elastic_chaos.watchers.logs import PREFIX, LogFollower

pytestmark = pytest.mark.k8s_api


def progress(step: int, node: str = "x") -> str:
    return PREFIX + json.dumps({"ev": "step", "t": time.time(), "step": step, "rank": 0, "world_size": 2,
                                "node": node})


def pods_in(core, namespace: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in
                  json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)["items"])


@pytest.mark.parametrize("kind", list(m.JobKind))
def test_start_runs_every_worker_pod_on_its_own_spot_machine_and_stop_removes_the_run(
        make_platform, core, custom, namespace, kind):
    platform = make_platform(job_kind=kind)
    job = JobSpec(nodes="1:2")
    platform.start(job)

    nodes = platform.nodes()
    assert [n.name for n in nodes] == [m.worker_pod_name(job.run_id, i) for i in (0, 1)]
    assert all(n.state is NodeState.RUNNING for n in nodes)
    machines = {n.labels["machine"] for n in nodes}
    assert len(machines) == 2 and all("-spot-" in mc for mc in machines)   # toleration + selector + anti-affinity
    assert platform.etcd_endpoint() is not None
    kinds = [(e.type, e.node) for e in platform.timeline.select(Source.NODE)]
    for n in nodes:
        assert (NodeEv.STARTED, n.name) in kinds and (NodeEv.RUNNING, n.name) in kinds

    platform.stop()
    assert pods_in(core, namespace) == []
    group, version = kind.api_version.split("/")
    listed = json.loads(custom.list_namespaced_custom_object(group, version, namespace, kind.plural,
                                                             _preload_content=False).data)["items"]
    assert listed == []
    assert all(n.state is NodeState.STOPPED for n in platform.nodes())
    platform.stop()                                       # idempotent


def test_the_elasticjob_pods_get_the_controllers_args_then_ours(make_platform, core, namespace):
    platform = make_platform()
    job = JobSpec(nodes="1:2", rdzv=RendezvousSpec(backend=RdzvBackend.ETCD_V2))
    platform.start(job)
    pod = json.loads(core.read_namespaced_pod(m.worker_pod_name(job.run_id, 0), namespace,
                                              _preload_content=False).data)
    args = pod["spec"]["containers"][0]["args"]
    assert args[0] == "--rdzv_backend=etcd"                        # prepended by the controller
    assert args.index("--rdzv_backend=etcd-v2") > 0                # ours comes later and wins in torchrun
    assert {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"} in pod["spec"]["containers"][0]["env"]


def test_start_fails_with_each_pods_state_when_nothing_can_schedule(make_platform):
    platform = make_platform(node_selector=(("eks.amazonaws.com/capacityType", "GPU-NOWHERE"),))
    platform.options = type(platform.options)(**{**platform.options.__dict__, "start_timeout_s": 2.0})
    with pytest.raises(PlatformError, match=r"were not running after 2s: .*worker-0: Pending"):
        platform.start(JobSpec(nodes="1:2"))


def test_pod_logs_are_followed_into_node_files_through_reconnects_restarts_and_replacement(
        make_platform, sim, namespace):
    sim.container_lines = ["agent says hello", progress(1)]
    platform = make_platform()
    job = JobSpec(nodes="1:2")
    platform.start(job)
    pod = m.worker_pod_name(job.run_id, 1)
    container = m.JobKind.ELASTICJOB.container
    path = platform.node_logs()[pod]
    text = lambda: path.read_text()  # noqa: E731
    until("the first lines", lambda: "agent says hello" in text())

    sim.logs.write(namespace, pod, container, progress(2))
    until("a followed line", lambda: '"step": 2' in text())
    follower = platform._followers[pod]
    assert follower.reconnect()                                     # the stream breaks...
    sim.logs.write(namespace, pod, container, progress(3))
    until("the line after the reconnect", lambda: '"step": 3' in text())
    assert text().count("agent says hello") == 1                   # ...and nothing is written twice

    sim.restart_container(pod, container, after=["second container instance"])
    until("the restarted container's log", lambda: "second container instance" in text())
    assert f"pod {pod} restarted" in text()

    platform.kill_node(pod, graceful=False)                         # the controller re-creates the pod
    until("the replacement pod's log", lambda: text().count("agent says hello") == 2, timeout_s=20)
    assert f"pod {pod} was replaced" in text()

    follower = LogFollower(platform.timeline, platform.node_logs)   # the local platform's parser, unchanged
    follower.poll()
    follower.finish()  # the follower keeps log files open between polls
    steps = [e.data.step for e in platform.timeline.select(ProgressEv.STEP, node=pod)]
    assert sorted(steps) == [1, 1, 2, 3]                            # the replacement printed step 1 again


def test_a_deleted_pod_is_lost_and_its_replacement_replaces_it(make_platform):
    platform = make_platform()
    job = JobSpec(nodes="1:2")
    platform.start(job)
    victim = m.worker_pod_name(job.run_id, 1)
    old_uid = platform.pods.get(victim).labels["uid"]

    hit = platform.kill_node(victim, graceful=False)

    assert hit.action == "delete-pod-grace-0" and hit.detail["gone"] is True
    until("the replacement running", lambda: (platform.pods.get(victim).state is NodeState.RUNNING
                                              and platform.pods.get(victim).labels["uid"] != old_uid))
    events = [(e.type, e.node, field_value(e.data, "replaces")) for e in platform.timeline.select(Source.NODE)]
    lost = events.index((NodeEv.LOST, victim, None))
    assert (NodeEv.STARTED, victim, victim) in events[lost:]
    assert platform.pods.get(victim).replaces == victim
    assert sum(1 for e in events if e[:2] == (NodeEv.LOST, victim)) == 1   # the watch did not say it twice


def test_a_pod_exiting_on_its_own_is_exited_with_its_code(make_platform, sim):
    platform = make_platform()
    job = JobSpec(nodes="1:2")
    platform.start(job)
    pod = m.worker_pod_name(job.run_id, 0)
    sim.finish_container(pod, m.JobKind.ELASTICJOB.container, exit_code=3)
    until("the exit", lambda: platform.pods.get(pod).state is NodeState.EXITED)
    assert platform.pods.get(pod).exit_code == 3


def test_the_store_host_is_worker_0_on_c10d_and_none_with_etcd(make_platform):
    platform = make_platform()
    platform.start(JobSpec(nodes="1:2", rdzv=RendezvousSpec(backend=RdzvBackend.C10D)))
    assert platform.store_host() == m.worker_pod_name(platform.job.run_id, 0)
    assert platform.etcd_endpoint() is None


def test_a_missing_crd_says_how_to_install_it(make_platform, namespace):
    platform = make_platform()
    group_missing = m.KubeSettings(namespace=namespace, job_kind=m.JobKind.ELASTICJOB)
    from elastic_chaos.platforms.kubernetes.actions import create_error as _create_error
    exc = type("ApiException", (Exception,), {})("not found")
    exc.status, exc.body = 404, json.dumps({"message": "the server could not find the requested resource"})
    message = _create_error({"kind": "ElasticJob", "metadata": {"name": "j", "labels": {m.RUN_LABEL: "j"}}},
                            exc, group_missing)
    assert "make kind-up" in message and "kind/manifests/crds/" in message
    assert platform is not None


def test_node_logs_paths_live_in_the_report_folder(make_platform, tmp_path):
    platform = make_platform()
    job = JobSpec(nodes="1:2")
    platform.start(job)
    logs = platform.node_logs()
    assert sorted(logs) == [m.worker_pod_name(job.run_id, i) for i in (0, 1)]
    assert all(Path(p).parent == platform.work_dir / "nodes" for p in logs.values())


def test_without_replacement_the_job_is_scaled_down_before_the_kill(make_platform, core, namespace):
    platform = make_platform()
    platform.options = type(platform.options)(**{**platform.options.__dict__, "replace_lost_nodes": False})
    job = JobSpec(nodes="1:3")
    platform.start(job)
    with pytest.raises(InjectionFailed, match="highest-index worker"):
        platform.kill_node(m.worker_pod_name(job.run_id, 1), graceful=False)   # the controller would drop -2
    victim = m.worker_pod_name(job.run_id, 2)

    platform.kill_node(victim, graceful=False)

    time.sleep(1.5)                                                # the sim controller would have re-created it
    assert pods_in(core, namespace) == [m.worker_pod_name(job.run_id, i) for i in (0, 1)]
    assert platform.pods.get(victim).state is NodeState.LOST


def test_a_provisioning_delay_holds_the_replacement_back_that_long(make_platform):
    platform = make_platform()
    platform.options = type(platform.options)(**{**platform.options.__dict__, "provisioning_delay_s": 2.0})
    job = JobSpec(nodes="1:2")
    platform.start(job)
    victim = m.worker_pod_name(job.run_id, 1)

    hit = platform.kill_node(victim, graceful=False)
    assert platform.replacement_pending()

    until("the replacement running", lambda: platform.pods.get(victim).state is NodeState.RUNNING, timeout_s=20)
    started = platform.timeline.select(NodeEv.STARTED, node=victim, after=hit.at)
    assert started and started[0].t - hit.at >= 2.0
    assert any(e.data.delay_s == 2.0 for e in platform.timeline.select(NodeEv.PROVISIONING))


def test_a_chaos_run_on_kubernetes_watches_the_rendezvous_in_the_jobs_etcd(admin, namespace, sim, job_etcd,
                                                                           tmp_path):
    import urllib.parse
    import urllib.request

    from kubernetes import client

    from elastic_chaos.platforms.kubernetes.options import KubernetesOptions
    from elastic_chaos.runner.run import ChaosRun
    state = (Path(__file__).parents[1] / "fixtures" / "rdzv_state_torch-2.13_2nodes.b64").read_text().strip()
    options = KubernetesOptions(settings=m.kind_settings(namespace=namespace), etcd_endpoint=job_etcd.endpoint,
                                start_timeout_s=30, watch_window_s=5)
    clients = {"core_v1": client.CoreV1Api(admin), "apps_v1": client.AppsV1Api(admin),
               "custom_objects": client.CustomObjectsApi(admin)}
    with ChaosRun(tmp_path / "run", platform="kubernetes", options=options, clients=clients) as run:
        job = JobSpec(nodes="1:2")
        run.start(job)
        url = f"{job_etcd.url}/v2/keys/torch/elastic/rendezvous/{job.run_id}"
        req = urllib.request.Request(url, data=urllib.parse.urlencode({"value": state}).encode(), method="PUT")
        urllib.request.urlopen(req, timeout=5).close()            # what torch's agents write there
        event = run.timeline.wait_for(lambda e: e.type == RdzvEv.ROUND_COMPLETE, timeout=10)
    assert event is not None and len(event.data.participants) == 2
    assert (tmp_path / "run" / "report.json").exists()
