"""The control plane of the local cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

All on 127.0.0.1 (nodes and pods reach the API server through the host's DNAT
of 10.87.0.1:16443, see cluster_net). Settings that differ from a default
cluster, and why:

* ``--node-monitor-grace-period=20s`` (default 40s): a lost or partitioned
  node turns NotReady in about 20 s, so fault scenarios do not wait 40 s.
  Pods on it are still evicted only after their 300 s ``unreachable``
  toleration (the default), as on a real cluster.
* ``--kubelet-preferred-address-types=InternalIP``: node names do not resolve
  here; without it ``kubectl logs/exec`` fail with "no such host".
* ``--leader-elect=false``: one replica of each.
"""

from __future__ import annotations

from typing import Any

from elastic_chaos.localcluster.base import (
    API_PORT,
    CONTROLLER_MANAGER_PORT,
    ETCD_CLIENT_PORT,
    ETCD_PEER_PORT,
    HOST_IP,
    SCHEDULER_PORT,
    SERVICE_NET,
    Layout,
    spawn,
)
from elastic_chaos.localcluster.deps import DEBIAN_ETCD
from elastic_chaos.localcluster.pki import LOCAL_SERVER, write_kubeconfig

NODE_MONITOR_GRACE_PERIOD = "20s"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def etcd_args(layout: Layout) -> list[str]:
    client = f"http://127.0.0.1:{ETCD_CLIENT_PORT}"
    peer = f"http://127.0.0.1:{ETCD_PEER_PORT}"
    return [DEBIAN_ETCD, "--name", "elastic-chaos", "--data-dir", str(layout.run / "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"elastic-chaos={peer}"]


def apiserver_args(layout: Layout) -> list[str]:
    p = layout.pki
    return [
        str(layout.bin / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{ETCD_CLIENT_PORT}",
        "--bind-address=127.0.0.1", f"--secure-port={API_PORT}", f"--advertise-address={HOST_IP}",
        f"--tls-cert-file={p / 'apiserver.crt'}", f"--tls-private-key-file={p / 'apiserver.key'}",
        f"--client-ca-file={p / 'ca.crt'}",
        f"--service-account-key-file={p / 'sa.pub'}", f"--service-account-signing-key-file={p / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-cluster-ip-range={SERVICE_NET}",
        "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
        f"--kubelet-client-certificate={p / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={p / 'apiserver-kubelet-client.key'}",
        "--kubelet-preferred-address-types=InternalIP",
        "--allow-privileged=true", f"--cert-dir={layout.run / 'apiserver-certs'}", "--profiling=false",
    ]


def _kubeconfig(layout: Layout, who: str) -> str:
    path = layout.run / "etc" / f"{who}.kubeconfig"
    write_kubeconfig(layout, path, who, LOCAL_SERVER)
    return str(path)


def controller_manager_args(layout: Layout) -> list[str]:
    p, kc = layout.pki, _kubeconfig(layout, "controller-manager")
    return [
        str(layout.bin / "kube-controller-manager"),
        f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
        "--bind-address=127.0.0.1", f"--secure-port={CONTROLLER_MANAGER_PORT}", "--port=0",
        f"--service-account-private-key-file={p / 'sa.key'}", f"--root-ca-file={p / 'ca.crt'}",
        "--use-service-account-credentials=true",
        f"--cluster-signing-cert-file={p / 'ca.crt'}", f"--cluster-signing-key-file={p / 'ca.key'}",
        f"--service-cluster-ip-range={SERVICE_NET}", "--leader-elect=false",
        f"--node-monitor-grace-period={NODE_MONITOR_GRACE_PERIOD}", "--profiling=false",
    ]


def scheduler_args(layout: Layout) -> list[str]:
    kc = _kubeconfig(layout, "scheduler")
    return [
        str(layout.bin / "kube-scheduler"),
        f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
        "--bind-address=127.0.0.1", f"--secure-port={SCHEDULER_PORT}", "--port=0", "--leader-elect=false",
        "--profiling=false",
    ]


ARGS = {
    "etcd": etcd_args,
    "kube-apiserver": apiserver_args,
    "kube-controller-manager": controller_manager_args,
    "kube-scheduler": scheduler_args,
}


def start_component(layout: Layout, state: dict[str, Any], name: str) -> None:
    """Start one control-plane component and record it (the caller saves the state)."""
    _, rec = spawn(ARGS[name](layout), layout.logs / f"{name}.log")
    state["procs"][name] = rec
