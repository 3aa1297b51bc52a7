"""Manifest rendering (pure): the kind variant and an EKS GPU variant, both job kinds."""
from __future__ import annotations

import pytest
import yaml

from elastic_chaos.errors import SpecError
from elastic_chaos.platforms.kubernetes import jobs
from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.spec import JobSpec, RdzvBackend, RendezvousSpec


def by_kind(docs: list[dict]) -> dict[str, dict]:
    return {d["kind"]: d for d in docs}


def pod_spec(job_doc: dict) -> dict:
    if job_doc["kind"] == "StatefulSet":
        return job_doc["spec"]["template"]["spec"]
    specs = job_doc["spec"].get("replicaSpecs") or job_doc["spec"]["pytorchReplicaSpecs"]
    return specs["Worker"]["template"]["spec"]


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "<from>") for e in container["env"]}


JOB = JobSpec(nodes="1:2", run_id="chaos-unit", checkpoint_every=25, max_restarts=4,
              rdzv=RendezvousSpec(last_call_timeout=5), env=(("FOO", "bar"),))


def test_kind_elasticjob_runs_on_tainted_spot_workers_with_shm_and_the_shared_host_folder():
    docs = by_kind(jobs.render(JOB, m.kind_settings(job_kind=m.JobKind.ELASTICJOB)))
    assert sorted(docs) == ["Deployment", "ElasticJob", "Service"]        # host path: no claim to create
    job = docs["ElasticJob"]
    assert job["apiVersion"] == "elastic.pytorch.org/v1alpha1" and job["metadata"]["name"] == "chaos-unit"
    assert job["spec"]["rdzvEndpoint"] == "chaos-unit-etcd:2379"
    assert (job["spec"]["minReplicas"], job["spec"]["maxReplicas"]) == (1, 2)
    assert job["spec"]["replicaSpecs"]["Worker"]["restartPolicy"] == "ExitCode"
    spec = pod_spec(job)
    assert spec["tolerations"] == [{"key": m.SPOT_TAINT, "operator": "Equal", "effect": "NoSchedule",
                                     "value": "true"}]
    assert spec["nodeSelector"] == {m.CAPACITY_LABEL: "SPOT"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}
    assert volumes["checkpoints"]["hostPath"]["path"] == "/shared/elastic-chaos"
    container = spec["containers"][0]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    assert container["imagePullPolicy"] == "IfNotPresent" and container["image"] == m.TRAINER_IMAGE


def test_elasticjob_args_override_the_controllers_backend_and_run_the_trainer():
    container = pod_spec(m.elasticjob(JOB, m.kind_settings()))["containers"][0]
    assert container["command"] == ["python", "-m", "torch.distributed.run"]
    args = container["args"]
    assert args[0] == "--rdzv_backend=etcd-v2"     # after the controller's --rdzv_backend=etcd: this one wins
    assert "--nproc_per_node=1" in args and "--max_restarts=4" in args and "--rdzv_conf=last_call_timeout=5" in args
    # the workers' output teed: the pod's log holds their lines prefixed [default<local rank>]:
    assert {"--redirects=3", "--tee=3", "--log_dir=/tmp/torchelastic"} <= set(args[:args.index("-m")])
    assert args[args.index("-m"):] == ["-m", "elastic_chaos.trainer.train",
                                       "--checkpoint-dir", "/checkpoints/chaos-unit",
                                       "--checkpoint-every", "25", "--step-time", "0.1"]
    env = env_of(container)
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"       # see docs/FINDINGS.md
    assert env["FOO"] == "bar" and env["CHECKPOINT_DIR"] == "/checkpoints/chaos-unit"
    assert env["ELASTIC_CHAOS_NODE_NAME"] == "<from>"              # the pod's own name


def test_etcd_is_3_5_with_the_v2_api_on_on_demand_capacity_and_a_node_port_on_kind():
    docs = by_kind(jobs.render(JOB, m.kind_settings()))
    etcd = docs["Deployment"]["spec"]["template"]["spec"]
    assert etcd["containers"][0]["image"].endswith(":v3.5.17")
    assert "--enable-v2=true" in etcd["containers"][0]["command"]
    assert etcd["nodeSelector"] == {m.CAPACITY_LABEL: "ON_DEMAND"}
    svc = docs["Service"]["spec"]
    assert svc["type"] == "NodePort" and svc["ports"][0]["nodePort"] == 32379
    assert svc["selector"] == docs["Deployment"]["spec"]["selector"]["matchLabels"]
    plain = by_kind(jobs.render(JOB, m.KubeSettings()))["Service"]["spec"]
    assert "type" not in plain and "nodePort" not in plain["ports"][0]


def test_pytorchjob_carries_the_elastic_policy_and_the_operators_container_name():
    job = m.pytorchjob(JOB, m.kind_settings(job_kind=m.JobKind.PYTORCHJOB))
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "PyTorchJob"
    assert job["spec"]["elasticPolicy"] == {
        "rdzvBackend": "etcd-v2", "rdzvHost": "chaos-unit-etcd", "rdzvPort": 2379, "rdzvId": "chaos-unit",
        "minReplicas": 1, "maxReplicas": 2, "maxRestarts": 4, "nProcPerNode": 1,
        "rdzvConf": [{"key": "last_call_timeout", "value": "5"}]}
    container = pod_spec(job)["containers"][0]
    assert container["name"] == "pytorch"
    assert not any(a.startswith(("--rdzv", "--max_restarts")) for a in container["args"])  # PET_* env does it
    assert {"--redirects=3", "--tee=3", "--log_dir=/tmp/torchelastic"} <= set(container["args"])


def test_c10d_puts_the_store_on_worker_0_and_renders_no_etcd():
    job = JobSpec(nodes="1:2", run_id="c10d-job", rdzv=RendezvousSpec(backend=RdzvBackend.C10D))
    for kind in (m.JobKind.ELASTICJOB, m.JobKind.PYTORCHJOB):   # the statefulset's: test_k8s_statefulset.py
        docs = jobs.render(job, m.KubeSettings(job_kind=kind))
        assert [d["kind"] for d in docs] == ["PersistentVolumeClaim", kind.kind]
        assert m.rdzv_endpoint(job, m.KubeSettings()) == "c10d-job-worker-0:29400"
        ports = pod_spec(docs[-1])["containers"][0]["ports"]
        assert ports[0]["containerPort"] == 29400
    policy = m.pytorchjob(job, m.KubeSettings(job_kind=m.JobKind.PYTORCHJOB))["spec"]["elasticPolicy"]
    assert (policy["rdzvBackend"], policy["rdzvHost"], policy["rdzvPort"]) == ("c10d", "c10d-job-worker-0", 29400)


@pytest.mark.parametrize("kind", list(m.JobKind))
def test_eks_gpu_variant_one_worker_per_gpu_on_spot_with_efa_and_efs(kind):
    job = JobSpec(nodes="2:4", nproc_per_node=8, run_id="gpu-run")
    settings = m.eks_gpu_settings(image="123.dkr.ecr.us-west-2.amazonaws.com/train:1", gpus_per_node=8,
                                  efa_per_node=4, job_kind=kind)
    docs = by_kind(jobs.render(job, settings))
    spec = pod_spec(docs[kind.kind])
    container = spec["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "4"}
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert {"--nproc_per_node=8", "--nproc-per-node=8"} & set(container["args"])
    assert container["imagePullPolicy"] == "Always"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["nodeSelector"] == {m.CAPACITY_LABEL: "SPOT"}
    assert next(v for v in spec["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"] == "16Gi"
    claim = docs["PersistentVolumeClaim"]
    assert claim["spec"] == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "100Gi"}},
                             "storageClassName": "efs-sc"}
    mounted = next(v for v in spec["volumes"] if v["name"] == "checkpoints")
    assert mounted["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"] == "gpu-run-checkpoints"


def test_eks_without_efa_asks_for_none_and_on_demand_capacity_can_be_chosen():
    settings = m.eks_gpu_settings(image="img", gpus_per_node=4, spot=False)
    spec = pod_spec(jobs.job_manifests(JobSpec(nproc_per_node=4, run_id="r"), settings)[-1])
    assert "vpc.amazonaws.com/efa" not in spec["containers"][0]["resources"]["limits"]
    assert spec["nodeSelector"] == {m.CAPACITY_LABEL: "ON_DEMAND"}


def test_nproc_per_node_must_match_the_gpus_of_a_pod():
    with pytest.raises(SpecError, match="nproc_per_node is 1 but each pod gets 8 GPUs"):
        jobs.render(JobSpec(run_id="r"), m.eks_gpu_settings(image="img", gpus_per_node=8))


def test_an_existing_claim_is_mounted_not_created():
    settings = m.KubeSettings(storage=m.CheckpointStorage(existing_claim="efs-claim"))
    docs = jobs.render(JobSpec(run_id="r"), settings)
    assert "PersistentVolumeClaim" not in [d["kind"] for d in docs]
    volume = next(v for v in pod_spec(docs[-1])["volumes"] if v["name"] == "checkpoints")
    assert volume["persistentVolumeClaim"]["claimName"] == "efs-claim"


def test_a_user_script_replaces_the_reference_trainer():
    job = JobSpec(run_id="r", script=("my_model/train.py", "--epochs", "3"))
    args = pod_spec(jobs.job_manifests(job, m.KubeSettings())[-1])["containers"][0]["args"]
    assert args[-3:] == ["my_model/train.py", "--epochs", "3"] and "elastic_chaos.trainer.train" not in args


@pytest.mark.parametrize("run_id", ["Chaos_1", "1abc", "x" * 41])
def test_a_run_id_that_cannot_name_pods_is_refused(run_id):
    with pytest.raises(SpecError, match="cannot name Kubernetes objects"):
        jobs.render(JobSpec(run_id=run_id), m.KubeSettings())


def test_a_bad_namespace_is_refused():
    with pytest.raises(SpecError, match="not a DNS label"):
        m.KubeSettings(namespace="Team_A")


def test_every_object_carries_the_run_label_and_the_yaml_round_trips():
    docs = jobs.render(JOB, m.KubeSettings())
    assert all(d["metadata"]["labels"][m.RUN_LABEL] == "chaos-unit" for d in docs)
    assert list(yaml.safe_load_all(m.to_yaml(docs))) == docs


def test_start_nodes_sets_the_initial_replicas():
    job = JobSpec(nodes="1:3", start_nodes=2, run_id="r")
    assert m.elasticjob(job, m.KubeSettings())["spec"]["replicaSpecs"]["Worker"]["replicas"] == 2
    assert m.elasticjob(job, m.KubeSettings())["spec"]["maxReplicas"] == 3


def manifest_cli(*args: str):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "manifest", *args], capture_output=True,
                          text=True, timeout=60)


def test_manifest_help_shows_examples():
    out = manifest_cli("--help")
    assert out.returncode == 0 and "examples:" in out.stdout and "eks-gpu" in out.stdout


@pytest.mark.parametrize("args,needle", [
    (("--nodes", "3:1"), "need 1 <= MIN <= MAX"),
    (("--preset", "eks-gpu"), "--preset eks-gpu needs --image"),
    (("--toleration", "spot"), "key=value:NoSchedule"),
    (("--gpus-per-node", "8"), "nproc_per_node is 1 but each pod gets 8 GPUs"),
    (("--run-id", "Bad_Id"), "cannot name Kubernetes objects"),
])
def test_manifest_bad_input_is_exit_2_with_a_message(args, needle):
    out = manifest_cli(*args)
    assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr


def test_manifest_prints_a_pytorchjob_with_its_elastic_policy():
    out = manifest_cli("--job-kind", "pytorchjob", "--run-id", "cli-run", "--nodes", "2:4")
    docs = list(yaml.safe_load_all(out.stdout))
    job = docs[-1]
    assert out.returncode == 0 and job["kind"] == "PyTorchJob" and job["metadata"]["name"] == "cli-run"
    assert (job["spec"]["elasticPolicy"]["minReplicas"], job["spec"]["elasticPolicy"]["maxReplicas"]) == (2, 4)
