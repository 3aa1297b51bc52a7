"""What a cluster says about itself: the ``kube-public/elastic-chaos-cluster`` ConfigMap.

A cluster made by ``make cluster-up`` (elastic_chaos.localcluster)
writes it, so ``pytest scenarios/ --platform kubernetes --kubeconfig
.cluster/kubeconfig`` needs no other flag: the image every node already has
(``imagePullPolicy: Never``), spot and on-demand capacity shaped like kind's and
an EKS node group's, a checkpoint folder every node and this machine share,
no DNS (workers find etcd by pod IP), where pods reach this machine (the
spot-notice stand-in) and who operates its machines (the node faults and the
node pool: elastic_chaos.platforms.kubernetes.machines). A cluster without the
ConfigMap is any cluster: the settings given are used as they are.

Only *defaults* are replaced: a setting given explicitly (a value other than
KubeSettings' own default) wins over the profile.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.platforms.kubernetes.watch import api_status, read_json

log = logging.getLogger(__name__)

NAMESPACE, NAME = "kube-public", "elastic-chaos-cluster"


@dataclass(frozen=True)
class ClusterProfile:
    machines: str | None = None
    """Who operates the machines: ``local-cluster`` (localcluster.ops), or None."""
    root: str | None = None
    """The local cluster's folder (its state, its node operations' lock)."""
    trainer_image: str | None = None
    shared_dir: str | None = None
    """The host folder mounted as every pod's checkpoint volume, seen at the same path here."""
    metadata_address: str | None = None
    """Where pods reach this machine (the spot-notice stand-in listens there)."""
    metadata_ports: tuple[int, int] | None = None
    pods_reachable: bool = False
    """This machine reaches pod IPs directly (the job's etcd is watched at its pod IP)."""
    dns: bool = True
    capacity_label: str = m.CAPACITY_LABEL
    spot_taint: str | None = None

    @classmethod
    def from_data(cls, data: dict[str, str]) -> ClusterProfile:
        ports = data.get("metadata-ports", "")
        low, _, high = ports.partition("-")
        return cls(machines=data.get("machines"), root=data.get("root"), trainer_image=data.get("trainer-image"),
                   shared_dir=data.get("shared-dir"), metadata_address=data.get("metadata-address"),
                   metadata_ports=(int(low), int(high)) if low.isdigit() and high.isdigit() else None,
                   dns=data.get("dns", "true").lower() != "false",
                   pods_reachable=data.get("pods-reachable", "false").lower() == "true",
                   capacity_label=data.get("capacity-label") or m.CAPACITY_LABEL, spot_taint=data.get("spot-taint"))

    def settings(self, given: m.KubeSettings) -> m.KubeSettings:
        """``given`` with the profile's values in place of KubeSettings' defaults."""
        default = m.KubeSettings()
        wanted: dict[str, Any] = {"dns": self.dns}
        if self.trainer_image:
            wanted.update(image=self.trainer_image, image_pull_policy="Never", etcd_image=self.trainer_image,
                          etcd_shell=True)
        if self.shared_dir:
            wanted["storage"] = m.CheckpointStorage(kind=m.StorageKind.HOST_PATH, host_path=self.shared_dir)
        if self.spot_taint:
            key, _, rest = self.spot_taint.partition("=")
            value, _, effect = rest.partition(":")
            wanted.update(tolerations=(m.Toleration(key, value or None, effect or "NoSchedule"),),
                          node_selector=((self.capacity_label, "SPOT"),),
                          etcd_node_selector=((self.capacity_label, "ON_DEMAND"),),
                          cpu=None, memory=None)   # the nodes share this machine's cores, as local nodes do
        keep = {k: v for k, v in wanted.items() if getattr(given, k) == getattr(default, k)}
        return dataclasses.replace(given, **keep)


def read_profile(core_v1: Any) -> ClusterProfile | None:
    """The cluster's profile, or None when it has none (or it may not be read: a 403 is
    logged, never fatal: the run then uses its settings as given)."""
    try:
        cm = read_json(core_v1.read_namespaced_config_map(NAME, NAMESPACE, _preload_content=False))
    except Exception as exc:
        status = api_status(exc)
        if status == 404:
            return None
        if status == 403:
            log.info("may not read %s/%s (the cluster profile): %s", NAMESPACE, NAME, exc)
            return None
        raise
    return ClusterProfile.from_data(dict(cm.get("data") or {}))
