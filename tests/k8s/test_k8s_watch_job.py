"""``elastic-chaos watch --platform kubernetes --job NAME`` finds a job's rendezvous from its
ElasticJob / PyTorchJob / StatefulSet on a real kube-apiserver (the k8s_api testenv).

The etcd the watch then reads is a real local one given with ``--etcd`` (the
testenv has no kubelet, so no pod and no ``kubectl port-forward`` target).
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from elastic_chaos.errors import SpecError
from elastic_chaos.host.etcd import EtcdServer
from elastic_chaos.platforms.kubernetes import discover, jobs
from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.spec import JobSpec, RdzvBackend, RendezvousSpec

pytestmark = pytest.mark.k8s_api


def create_job(custom, namespace: str, kind: m.JobKind, backend: RdzvBackend, run_id: str) -> None:
    job = JobSpec(nodes="1:2", run_id=run_id, rdzv=RendezvousSpec(backend=backend))
    body = jobs.job_manifests(job, m.KubeSettings(namespace=namespace, job_kind=kind))[-1]
    group, version = kind.api_version.split("/")
    custom.create_namespaced_custom_object(group, version, namespace, kind.plural, body)   # any REST object


@pytest.mark.parametrize("kind", list(m.JobKind))
def test_the_rendezvous_of_an_etcd_job_is_found_from_its_object(custom, namespace, crds_installed, kind):
    create_job(custom, namespace, kind, RdzvBackend.ETCD_V2, "watched")
    rdzv = discover.locate(custom, namespace, "watched")
    assert (rdzv.kind, rdzv.run_id, rdzv.backend) == (kind.kind, "watched", "etcd-v2")
    assert (rdzv.host, rdzv.port) == ("watched-etcd", 2379)
    assert rdzv.in_cluster_endpoint() == f"watched-etcd.{namespace}.svc:2379"


def test_a_c10d_job_cannot_be_watched_passively(custom, namespace, crds_installed):
    create_job(custom, namespace, m.JobKind.ELASTICJOB, RdzvBackend.C10D, "storejob")
    with pytest.raises(SpecError, match="'c10d' rendezvous backend"):
        discover.locate(custom, namespace, "storejob")


def test_a_missing_job_names_the_namespace(custom, namespace, crds_installed):
    with pytest.raises(SpecError, match=f"no ElasticJob, PyTorchJob or StatefulSet named 'nope' .* in "
                                        f"namespace '{namespace}'"):
        discover.locate(custom, namespace, "nope")


def test_the_cli_watches_a_job_found_by_name(k8s_api, custom, namespace, crds_installed, tmp_path):
    create_job(custom, namespace, m.JobKind.ELASTICJOB, RdzvBackend.ETCD_V2, "cli-job")
    with EtcdServer(tmp_path / "etcd-data") as etcd:
        out = subprocess.run(
            [sys.executable, "-m", "elastic_chaos.cli.main", "watch", "--platform", "kubernetes", "--job", "cli-job",
             "--namespace", namespace, "--kubeconfig", str(k8s_api.kubeconfig("admin")),
             "--etcd", etcd.endpoint, "--duration", "2", "--record", str(tmp_path / "rec")],
            capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"ElasticJob {namespace}/cli-job: rendezvous 'cli-job' at cli-job-etcd:2379 (etcd-v2)" in out.stdout
    assert "watching rendezvous 'cli-job'" in out.stderr
    report = json.loads((tmp_path / "rec" / "report.json").read_text())
    assert report["platform"] == "kubernetes" and report["verdict"]["passed"] is True
