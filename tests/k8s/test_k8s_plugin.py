"""``pytest --platform kubernetes|kind --kubeconfig ...``: the start_job fixture runs the
scenario's job on the cluster (here: the real API server, the sim playing its nodes)."""
from __future__ import annotations

import json

import pytest

from elastic_chaos.errors import SpecError
from elastic_chaos.hypotheses.api import settings
from elastic_chaos.platforms import platform_options
from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.platforms.kubernetes.kind_cluster import KindOptions
from elastic_chaos.platforms.kubernetes.options import KubernetesOptions, parse_toleration

SCENARIO = """
from elastic_chaos.events import FaultEv, NodeEv
from elastic_chaos.faults.kubernetes import DeletePod

def test_scenario(start_job):
    job = start_job(nodes="1:2", etcd_endpoint="{etcd}", start_timeout_s=30, watch_window_s=5{extra})
    assert job.platform.name == "{platform}"
    assert job.platform.settings.job_kind.value == "{kind}"
    assert len(job.platform.alive_nodes()) == 2
    record = job.inject(DeletePod())
    assert job.timeline.select(FaultEv.INJECTED, node=record.target)
    assert job.timeline.select(NodeEv.LOST, node=record.target)
"""


@pytest.mark.k8s_api
@pytest.mark.parametrize("platform,kind", [("kubernetes", "pytorchjob"), ("kind", "elasticjob")])
def test_elastic_job_runs_on_the_cluster_the_flags_name(pytester, k8s_api, namespace, sim, job_etcd,
                                                        platform, kind):
    extra = ', tolerations=["elastic-chaos/spot=true:NoSchedule"]' if platform == "kubernetes" else ""
    pytester.makepyfile(test_scenario=SCENARIO.format(etcd=job_etcd.endpoint, platform=platform, kind=kind,
                                                      extra=extra))
    reports = pytester.path / "reports"
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", f"--platform={platform}", f"--kubeconfig={k8s_api.kubeconfig('admin')}",
        "--kube-context=admin@test", f"--namespace={namespace}", f"--job-kind={kind}",
        f"--chaos-reports={reports}")
    result.assert_outcomes(passed=1)
    report = json.loads(next(reports.glob("*/report.json")).read_text())
    assert report["verdict"]["passed"] is True
    assert len(list(reports.glob("*/nodes/*.log"))) >= 2                  # pod logs followed into the report


def test_unknown_options_name_the_accepted_ones():
    with pytest.raises(SpecError, match=r"unknown option\(s\) \['etcd_binary'\]; kind accepts: .*docker.*"
                                        r"gpus_per_node.*nodes"):
        settings(None, {"etcd_binary": "/x"}, "kind")


def test_plain_values_become_typed_settings(tmp_path):
    kubeconfig = tmp_path / "k"   # read when the options are made (elastic_chaos.platforms.kubernetes.kubeconfig)
    kubeconfig.write_text("apiVersion: v1\nclusters: []\nusers: []\ncontexts:\n- name: c\ncurrent-context: c\n")
    opts = platform_options("kubernetes", {"job_kind": "PyTorchJob", "gpus_per_node": 8,
                                           "node_selector": {"eks.amazonaws.com/capacityType": "SPOT"},
                                           "tolerations": ["nvidia.com/gpu:NoSchedule"],
                                           "provisioning_delay_s": 30.0, "kubeconfig": str(kubeconfig),
                                           "namespace": "train"})
    assert isinstance(opts, KubernetesOptions) and not isinstance(opts, KindOptions)
    assert opts.kubeconfig == str(kubeconfig) and opts.provisioning_delay_s == 30.0
    s = opts.settings
    assert (s.namespace, s.job_kind, s.gpus_per_node) == ("train", m.JobKind.PYTORCHJOB, 8)
    assert s.node_selector == (("eks.amazonaws.com/capacityType", "SPOT"),)
    assert s.tolerations == (m.Toleration("nvidia.com/gpu", None, "NoSchedule", "Exists"),)
    kind = platform_options("kind", {})
    assert kind.context == "kind-elastic-chaos" and kind.settings.storage.kind is m.StorageKind.HOST_PATH


def test_a_bad_toleration_or_job_kind_says_how_to_write_it():
    with pytest.raises(SpecError, match="key=value:NoSchedule"):
        parse_toleration("spot")
    with pytest.raises(SpecError, match="elasticjob or pytorchjob"):
        platform_options("kubernetes", {"job_kind": "mpijob"})
