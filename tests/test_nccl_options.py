"""NCCL's own timeouts as job options: one declaration each, node environment on every
platform, set by the fast preset, a value given beside it wins."""
from __future__ import annotations

import pytest

from elastic_chaos.errors import SpecError
from elastic_chaos.hypotheses.api import settings
from elastic_chaos.hypotheses.catalog import get
from elastic_chaos.options import declared
from elastic_chaos.platforms.kubernetes import jobs
from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.platforms.kubernetes.settings import JobKind
from elastic_chaos.platforms.local.gpus import GpuMode, plan
from elastic_chaos.spec import JobSpec, job_from_options, preset

NCCL_ENV = {"TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "1000", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
            "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "60"}


def test_each_nccl_option_names_its_variable_once():
    envs = {d.name: d.meta.env for d in declared(JobSpec) if d.meta.env}
    assert envs == {"nccl_dump_wait_ms": "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC",
                    "nccl_async_error_handling": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                    "nccl_heartbeat_timeout_s": "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"}


def test_the_fast_preset_sets_nccls_timeouts_and_the_default_leaves_torchs():
    fast = preset("fast").apply(JobSpec()).node_env()
    assert NCCL_ENV.items() <= fast.items()
    assert not any(k.startswith("TORCH_NCCL") for k in preset("default").apply(JobSpec()).node_env())


def test_a_value_given_beside_the_preset_wins_and_env_wins_over_both():
    job = job_from_options({"rdzv_preset": "fast", "nccl_dump_wait_ms": 5000,
                            "env": (("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "120"),)})
    env = job.node_env()
    assert env["TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC"] == "5000" and env["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] == "120"


def test_out_of_range_values_are_refused_with_what_is_allowed():
    with pytest.raises(SpecError, match="nccl_async_error_handling 4: must be a whole number >= 0 and <= 3"):
        JobSpec(nccl_async_error_handling=4)


@pytest.mark.parametrize("kind", list(JobKind))
def test_kubernetes_workers_get_the_same_environment(kind):
    job = preset("fast").apply(JobSpec(nodes="1:2", run_id="chaos-unit"))
    docs = jobs.render(job, m.kind_settings(job_kind=kind))
    workers = [d for d in docs if d["kind"] in ("StatefulSet", "ElasticJob", "PyTorchJob")
               and d["metadata"]["name"] != f"{job.run_id}-etcd"]
    containers = [c for d in workers for c in _pod_templates(d) for c in c["spec"]["containers"]]
    assert containers, f"no worker container in {[d['kind'] for d in docs]}"
    for container in containers:
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert NCCL_ENV.items() <= env.items(), container["name"]


def _pod_templates(doc):
    """A workload's pod templates: a StatefulSet's one, an operator job's one per replica type."""
    if doc["kind"] == "StatefulSet":
        return [doc["spec"]["template"]]
    return [r["template"] for r in doc["spec"].get("replicaSpecs", doc["spec"].get("pytorchReplicaSpecs", {})).values()]


def test_the_demos_job_fits_a_one_gpu_machine():
    job = settings(get("kill-node"), {}, "local").job
    placement = plan(["0"], slots=job.max_nodes, nproc_per_node=job.nproc_per_node, backend=job.backend)
    assert placement.mode is GpuMode.SHARED and placement.own_host_ids
