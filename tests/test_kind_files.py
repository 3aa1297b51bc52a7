"""kind/ agrees with the code that relies on it (labels, taints, ports, paths, images).

kind itself cannot run here (no Docker); these checks keep the cluster config,
manifests and Makefile targets from drifting away from elastic_chaos.platforms.
"""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.platforms.kubernetes.kind_cluster import KindOptions

KIND = Path(__file__).resolve().parents[1] / "kind"


def docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_cluster_has_one_control_plane_one_on_demand_and_two_tainted_spot_workers():
    cluster = docs(KIND / "cluster.yaml")[0]
    settings = m.kind_settings()
    assert cluster["name"] == KindOptions().context.removeprefix("kind-")
    roles = [n["role"] for n in cluster["nodes"]]
    assert roles == ["control-plane", "worker", "worker", "worker"]
    workers = cluster["nodes"][1:]
    groups = [w["labels"][m.CAPACITY_LABEL] for w in workers]
    assert groups == ["ON_DEMAND", "SPOT", "SPOT"]
    assert dict(settings.etcd_node_selector) == {m.CAPACITY_LABEL: "ON_DEMAND"}
    assert dict(settings.node_selector) == {m.CAPACITY_LABEL: "SPOT"}
    toleration = settings.tolerations[0]
    for w in workers[1:]:
        join = yaml.safe_load(w["kubeadmConfigPatches"][0])
        assert join["nodeRegistration"]["taints"] == [{"key": toleration.key, "value": toleration.value,
                                                       "effect": toleration.effect}]


def test_every_worker_mounts_the_shared_checkpoint_folder_and_etcd_is_reachable_from_the_host():
    cluster = docs(KIND / "cluster.yaml")[0]
    settings = m.kind_settings()
    for w in cluster["nodes"][1:]:
        assert settings.storage.host_path.startswith(w["extraMounts"][0]["containerPath"] + "/")
    mapping = cluster["nodes"][0]["extraPortMappings"][0]
    assert mapping["containerPort"] == mapping["hostPort"] == settings.etcd_node_port
    assert KindOptions().etcd_endpoint == f"{mapping['listenAddress']}:{mapping['hostPort']}"
    mk = (KIND / "kind.mk").read_text()
    assert f"KIND_SHARED ?= {cluster['nodes'][1]['extraMounts'][0]['hostPath']}" in mk


def test_etcd_everywhere_is_the_same_3_5_with_the_v2_api():
    etcd = docs(KIND / "manifests" / "etcd.yaml")[0]["spec"]["template"]["spec"]["containers"][0]
    assert etcd["image"] == m.ETCD_IMAGE and "--enable-v2=true" in etcd["command"]
    assert f"ETCD_IMAGE ?= {m.ETCD_IMAGE}" in (KIND / "kind.mk").read_text()


def test_the_makefile_targets_and_the_ci_workflow_exist():
    mk = (KIND / "kind.mk").read_text()
    for target in ("kind-up", "kind-test", "kind-down"):
        assert re.search(rf"^{target}:", mk, re.M)
    assert "include kind/kind.mk" in (KIND.parent / "Makefile").read_text()
    workflow = (KIND.parent / ".github" / "workflows" / "kind.yml").read_text()
    assert "make kind-up" in workflow and "make kind-test" in workflow and "make kind-down" in workflow
    assert "--trainer-image $(KIND_IMAGE)" in mk and f"KIND_IMAGE ?= {m.TRAINER_IMAGE}" in mk


def test_the_trainer_image_has_what_the_pods_run():
    dockerfile = (KIND / "Dockerfile").read_text()
    assert "python-etcd" in dockerfile                  # torch's etcd-v2 rendezvous imports it
    assert "COPY elastic_chaos/ elastic_chaos/" in dockerfile and "download.pytorch.org/whl/cpu" in dockerfile


def test_the_controller_runs_on_on_demand_capacity_and_may_manage_its_pods():
    objs = {d["kind"]: d for d in docs(KIND / "manifests" / "controller" / "elasticjob-controller.yaml")}
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {m.CAPACITY_LABEL: "ON_DEMAND"}
    rules = objs["ClusterRole"]["rules"]
    assert any("elasticjobs" in r["resources"] for r in rules) and any("pods" in r["resources"] for r in rules)
