"""The job kind without an operator (pure rendering), and the shell its pods and etcd run under.

The manifests are checked as data; the supervisor and the etcd loop are real
``sh`` scripts, run here with stand-in commands (their marker paths moved to a
temporary folder): what makes an agent's exit final, what a SIGTERM does,
what the etcd-outage fault's hold file does. The real proof is the local
cluster (``make cluster-test``).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from elastic_chaos.errors import SpecError
from elastic_chaos.platforms.kubernetes import jobs
from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.platforms.kubernetes import statefulset as sts
from elastic_chaos.platforms.kubernetes.profile import ClusterProfile
from elastic_chaos.spec import JobSpec, PgBackend, RdzvBackend, RendezvousSpec

JOB = JobSpec(nodes="1:3", run_id="chaos-sts", checkpoint_every=25, max_restarts=4, pg_timeout_s=10,
              rdzv=RendezvousSpec(last_call_timeout=3), env=(("FOO", "bar"),))
NO_DNS = m.KubeSettings(dns=False, etcd_shell=True)


def by_kind(docs: list[dict]) -> dict[str, dict]:
    return {d["kind"]: d for d in docs}


def worker(docs: list[dict]) -> dict:
    return by_kind(docs)["StatefulSet"]["spec"]["template"]["spec"]["containers"][0]


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") or e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}


def test_the_default_job_kind_is_the_statefulset_that_needs_no_operator():
    assert m.KubeSettings().job_kind is m.JobKind.STATEFULSET and not m.JobKind.STATEFULSET.needs_operator
    docs = jobs.render(JOB, m.KubeSettings())
    assert [d["kind"] for d in docs] == ["PersistentVolumeClaim", "Deployment", "Service", "StatefulSet"]
    s = by_kind(docs)["StatefulSet"]
    assert s["metadata"]["name"] == "chaos-sts-worker" and s["spec"]["podManagementPolicy"] == "Parallel"
    assert s["spec"]["replicas"] == 3 and s["spec"]["serviceName"] == "chaos-sts-worker"
    assert s["spec"]["selector"]["matchLabels"] == {m.RUN_LABEL: "chaos-sts", m.ROLE_LABEL: "worker"}


def test_with_dns_workers_find_etcd_by_its_service_name():
    args = worker(jobs.render(JOB, m.KubeSettings()))["args"]
    assert "--rdzv-endpoint=chaos-sts-etcd:2379" in args


def test_without_dns_workers_get_the_etcd_pods_ip_and_no_service_is_made():
    base = m.render_base(JOB, NO_DNS)
    assert [d["kind"] for d in base] == ["PersistentVolumeClaim", "Deployment"]
    args = worker(jobs.job_manifests(JOB, NO_DNS, etcd_address="10.88.1.7"))["args"]
    assert "--rdzv-endpoint=10.88.1.7:2379" in args
    with pytest.raises(SpecError, match="no DNS"):
        jobs.job_manifests(JOB, NO_DNS)


def test_torchrun_advertises_the_pod_ip_and_runs_the_trainer_with_every_job_argument():
    c = worker(jobs.job_manifests(JOB, NO_DNS, etcd_address="10.88.1.7"))
    args = c["args"]
    assert args[:3] == ["python3", "-m", "torch.distributed.run"]
    assert {"--nnodes=1:3", "--rdzv-backend=etcd-v2", "--rdzv-id=chaos-sts", "--max-restarts=4",
            "--local-addr=$(POD_IP)", "--rdzv-conf=last_call_timeout=3"} <= set(args)
    assert args[args.index("-m", 3):] == ["-m", "elastic_chaos.trainer.train",
                                          "--checkpoint-dir", "/checkpoints/chaos-sts",
                                          "--checkpoint-every", "25", "--step-time", "0.1", "--pg-timeout", "10"]
    env = env_of(c)
    assert env["POD_IP"] == "status.podIP" and env["TZ"] == "UTC" and env["FOO"] == "bar"
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


def test_the_supervisor_is_pid_1_and_its_marker_outlives_a_container_restart():
    docs = jobs.job_manifests(JOB, NO_DNS, etcd_address="10.88.1.7", env={"AWS_EC2_METADATA_SERVICE_ENDPOINT": "x"})
    pod = by_kind(docs)["StatefulSet"]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["command"] == ["/bin/sh", "-c", sts.SUPERVISOR, "elastic-chaos-agent"]
    assert {"name": "agent-mark", "mountPath": sts.MARK_DIR} in c["volumeMounts"]
    assert {"name": "agent-mark", "emptyDir": {}} in pod["volumes"]
    assert env_of(c)["AWS_EC2_METADATA_SERVICE_ENDPOINT"] == "x"


def test_workdir_and_backend_reach_every_job_kind():
    job = JobSpec(run_id="chaos-wd", script=("train.py", "--lr", "1"), backend=PgBackend.GLOO, workdir="exp")
    for kind in m.JobKind:
        settings = m.KubeSettings(job_kind=kind)
        docs = jobs.render(job, settings, etcd_address="10.0.0.1")
        job_doc = docs[-1]
        specs = job_doc["spec"].get("replicaSpecs") or job_doc["spec"].get("pytorchReplicaSpecs")
        template = specs["Worker"]["template"] if specs else job_doc["spec"]["template"]
        c = template["spec"]["containers"][0]
        assert c["workingDir"] == "/checkpoints/chaos-wd/exp", kind
        tail = c["args"][-6:]
        assert tail == ["elastic_chaos.trainer.launch", "--backend", "gloo", "train.py", "--lr", "1"], kind
    assert m.workdir(JobSpec(run_id="r", workdir="/data/run")) == "/data/run"
    assert m.workdir(JobSpec(run_id="r")) == "/checkpoints/r/workdir"


def test_c10d_on_a_statefulset_needs_dns():
    job = JobSpec(run_id="chaos-c", rdzv=RendezvousSpec(backend=RdzvBackend.C10D))
    with pytest.raises(SpecError, match="DNS"):
        jobs.render(job, NO_DNS)
    docs = by_kind(jobs.render(job, m.KubeSettings()))
    assert docs["Service"]["spec"]["clusterIP"] == "None"
    assert "--rdzv-endpoint=chaos-c-worker-0.chaos-c-worker.default.svc.cluster.local:29400" in \
        docs["StatefulSet"]["spec"]["template"]["spec"]["containers"][0]["args"]


def test_etcd_runs_under_its_loop_only_where_the_image_has_a_shell():
    plain = by_kind(m.render_base(JOB, m.KubeSettings()))["Deployment"]["spec"]["template"]["spec"]
    assert plain["containers"][0]["command"][0] == "/usr/local/bin/etcd"
    looped = by_kind(m.render_base(JOB, NO_DNS))["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert looped["command"][:4] == ["/bin/sh", "-c", m.ETCD_LOOP, "etcd-loop"]
    assert "--advertise-client-urls=http://$(POD_IP):2379" in looped["command"]


def test_the_local_clusters_profile_fills_in_defaults_but_not_what_was_given():
    prof = ClusterProfile.from_data({"machines": "local-cluster", "trainer-image": "localhost/t:1",
                                     "shared-dir": "/srv/shared", "dns": "false", "pods-reachable": "true",
                                     "spot-taint": "elastic-chaos/spot=true:NoSchedule",
                                     "metadata-address": "10.87.0.1", "metadata-ports": "16480-16489"})
    assert prof.metadata_ports == (16480, 16489) and prof.pods_reachable and not prof.dns
    s = prof.settings(m.KubeSettings())
    assert (s.image, s.image_pull_policy, s.etcd_image, s.etcd_shell) == ("localhost/t:1", "Never", "localhost/t:1",
                                                                          True)
    assert s.storage.kind is m.StorageKind.HOST_PATH and s.storage.host_path == "/srv/shared"
    assert dict(s.node_selector) == {m.CAPACITY_LABEL: "SPOT"} and s.tolerations[0].key == "elastic-chaos/spot"
    assert s.cpu is None and s.memory is None
    given = prof.settings(m.KubeSettings(image="mine:2", cpu="3"))
    assert given.image == "mine:2" and given.cpu == "3" and given.etcd_image == "localhost/t:1"


def test_the_local_cluster_writes_the_profile_the_platform_reads(tmp_path: Path):
    from elastic_chaos.localcluster import base, ops
    layout = base.Layout(tmp_path)
    layout.images.mkdir(parents=True)
    (layout.images / "trainer.ref").write_text("localhost/elastic-chaos/trainer:abc\n")
    prof = ClusterProfile.from_data(ops.profile(layout))
    assert prof.machines == "local-cluster" and prof.root == str(tmp_path)
    assert prof.trainer_image == "localhost/elastic-chaos/trainer:abc" and prof.shared_dir == str(layout.shared)
    assert prof.spot_taint == f"{m.SPOT_TAINT}=true:NoSchedule" and prof.capacity_label == m.CAPACITY_LABEL
    assert (base.PROFILE_NAMESPACE, base.PROFILE_NAME) == ("kube-public", "elastic-chaos-cluster")


# -- the shell, run for real -----------------------------------------------------------------
def supervise(mark: Path, *command: str) -> subprocess.Popen[str]:
    script = sts.SUPERVISOR.replace(sts.MARK_DIR, str(mark))
    return subprocess.Popen(["/bin/sh", "-c", script, "agent", *command], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_an_agent_that_exits_by_itself_stays_down_across_container_restarts(tmp_path: Path):
    first = supervise(tmp_path, "sh", "-c", "exit 1")
    first.communicate(timeout=10)
    assert first.returncode == 1 and (tmp_path / "agent-exit").read_text().strip() == "1"
    again = supervise(tmp_path, "sh", "-c", "echo SHOULD-NOT-RUN")
    time.sleep(0.5)
    assert again.poll() is None                      # idles instead of running the agent again
    again.send_signal(signal.SIGTERM)
    out, _ = again.communicate(timeout=10)
    assert again.returncode == 0 and "stays down" in out and "SHOULD-NOT-RUN" not in out


def test_an_agent_killed_by_a_signal_is_retried(tmp_path: Path):
    proc = supervise(tmp_path, "sh", "-c", "kill -KILL $$")
    proc.communicate(timeout=10)
    assert proc.returncode == 128 + 9 and not (tmp_path / "agent-exit").exists()


def test_sigterm_reaches_the_agent_which_ends_as_it_chooses(tmp_path: Path):
    agent = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(7)); "
             "print('up', flush=True); time.sleep(30)")
    proc = supervise(tmp_path, sys.executable, "-c", agent)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=10)
    assert proc.returncode == 7 and time.monotonic() - started < 5


def test_the_etcd_loop_holds_etcd_down_while_the_hold_file_exists(tmp_path: Path):
    script = m.ETCD_LOOP.replace(m.ETCD_DATA, str(tmp_path))
    hold, pidfile = Path(m.ETCD_HOLD.replace(m.ETCD_DATA, str(tmp_path))), Path(m.ETCD_PID.replace(m.ETCD_DATA,
                                                                                                    str(tmp_path)))
    loop = subprocess.Popen(["/bin/sh", "-c", script, "etcd-loop", "sleep", "60"], stdout=subprocess.DEVNULL)
    try:
        first = _wait_pid(pidfile, None)
        hold.touch()
        os.kill(first, signal.SIGKILL)
        time.sleep(1.0)
        assert int(pidfile.read_text()) == first     # held down: not started again
        hold.unlink()
        assert _wait_pid(pidfile, first) != first     # released: a new etcd
    finally:
        loop.send_signal(signal.SIGTERM)
        assert loop.wait(10) == 0


def _wait_pid(pidfile: Path, old: int | None) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            pid = int(pidfile.read_text())
            if pid != old:
                return pid
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError("the loop started no etcd")
