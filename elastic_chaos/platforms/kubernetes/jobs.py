"""Every object one run creates, whatever its job kind: the base (claim, etcd) from
:mod:`~elastic_chaos.platforms.kubernetes.manifests`, then the job: a StatefulSet
(:mod:`~elastic_chaos.platforms.kubernetes.statefulset`) or an operator's ElasticJob/PyTorchJob."""
from __future__ import annotations

from elastic_chaos.platforms.kubernetes import statefulset
from elastic_chaos.platforms.kubernetes.manifests import job_manifest, render_base
from elastic_chaos.platforms.kubernetes.settings import JobKind, KubeSettings, Manifest
from elastic_chaos.spec import JobSpec


def render(job: JobSpec, settings: KubeSettings, *, etcd_address: str | None = None,
           env: dict[str, str] | None = None) -> list[Manifest]:
    """Every object one run creates, in apply order: claim, etcd, job (see
    :func:`~elastic_chaos.platforms.kubernetes.manifests.render_base` and :func:`job_manifests`)."""
    return [*render_base(job, settings), *job_manifests(job, settings, etcd_address=etcd_address, env=env)]


def job_manifests(job: JobSpec, settings: KubeSettings, *, etcd_address: str | None = None,
                  env: dict[str, str] | None = None) -> list[Manifest]:
    """The job object(s). ``etcd_address``: the etcd pod's IP, for a statefulset on a cluster
    without DNS (known once etcd runs); ``env``: more environment for every worker."""
    if settings.job_kind is JobKind.STATEFULSET:
        return statefulset.render(job, settings, etcd_address=etcd_address, env=env or {})
    return [job_manifest(job, settings, env=env)]
