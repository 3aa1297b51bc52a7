"""The cluster's PKI, made with openssl: one CA, a certificate per component, the SA key pair.

A fresh PKI per ``up`` (it lives in the run folder that ``down`` removes), so a
kubeconfig never outlives its cluster. ECDSA P-256 keys: a key takes
milliseconds, where RSA 2048 takes a noticeable fraction of a second on
2 cores. Kubeconfigs embed their certificates, so each one is a single file.
"""

from __future__ import annotations

import base64
from pathlib import Path

from elastic_chaos.localcluster.base import API_PORT, HOST_IP, KUBERNETES_SERVICE_IP, Layout, run

DAYS = "3650"
API_SANS = ",".join([
    "DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local", "DNS:localhost",
    "IP:127.0.0.1", f"IP:{HOST_IP}", f"IP:{KUBERNETES_SERVICE_IP}",
])


def _key(path: Path) -> None:
    run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path)])
    path.chmod(0o600)


def make_ca(pki: Path) -> None:
    """CA and service-account key pair. Idempotent: keeps what exists."""
    pki.mkdir(parents=True, exist_ok=True)
    if not (pki / "ca.crt").exists():
        _key(pki / "ca.key")
        run(["openssl", "req", "-x509", "-new", "-key", str(pki / "ca.key"), "-out", str(pki / "ca.crt"),
             "-days", DAYS, "-subj", "/CN=elastic-chaos-ca"])
    if not (pki / "sa.pub").exists():
        _key(pki / "sa.key")
        run(["openssl", "pkey", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub")])


def make_cert(pki: Path, name: str, cn: str, org: str = "", sans: str = "") -> None:
    """``name.key`` + ``name.crt`` signed by the CA (client and server use). Idempotent."""
    if (pki / f"{name}.crt").exists():
        return
    _key(pki / f"{name}.key")
    ext = pki / f"{name}.ext"
    lines = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
             "extendedKeyUsage=serverAuth,clientAuth"]
    if sans:
        lines.append(f"subjectAltName={sans}")
    ext.write_text("\n".join(lines) + "\n")
    subj = f"/CN={cn}" + (f"/O={org}" if org else "")
    csr = pki / f"{name}.csr"
    run(["openssl", "req", "-new", "-key", str(pki / f"{name}.key"), "-out", str(csr), "-subj", subj])
    run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"),
         "-CAcreateserial", "-out", str(pki / f"{name}.crt"), "-days", DAYS, "-extfile", str(ext)])
    csr.unlink()
    ext.unlink()


def make_control_plane_pki(layout: Layout) -> None:
    """Everything the control plane and the admin need (node certificates come with each node)."""
    pki = layout.pki
    make_ca(pki)
    make_cert(pki, "apiserver", "kube-apiserver", sans=API_SANS)
    make_cert(pki, "apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters")
    make_cert(pki, "admin", "elastic-chaos-admin", "system:masters")
    make_cert(pki, "controller-manager", "system:kube-controller-manager")
    make_cert(pki, "scheduler", "system:kube-scheduler")


def make_node_cert(layout: Layout, node: str) -> None:
    """The kubelet's client certificate: the Node authorizer knows it as ``system:node:NODE``."""
    make_cert(layout.pki, f"kubelet-{node}", f"system:node:{node}", "system:nodes")


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(layout: Layout, dest: Path, cert: str, server: str) -> None:
    """A self-contained kubeconfig (certificates embedded) for the identity ``cert``."""
    pki = layout.pki
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: elastic-chaos
  cluster:
    certificate-authority-data: {_b64(pki / "ca.crt")}
    server: {server}
users:
- name: {cert}
  user:
    client-certificate-data: {_b64(pki / f"{cert}.crt")}
    client-key-data: {_b64(pki / f"{cert}.key")}
contexts:
- name: elastic-chaos
  context: {{cluster: elastic-chaos, user: {cert}}}
current-context: elastic-chaos
""")
    dest.chmod(0o600)


LOCAL_SERVER = f"https://127.0.0.1:{API_PORT}"
BRIDGE_SERVER = f"https://{HOST_IP}:{API_PORT}"
