"""A real kube-apiserver on 127.0.0.1 for the ``k8s_api`` tests (no kind, no Docker here).

``make k8s-testenv`` builds the binary once (kind/testenv/build-kube-apiserver.sh)
into ``.k8s-testenv/bin``. This module starts it against a real etcd
(elastic_chaos.host.etcd.EtcdServer) with:

- a CA and serving certificate generated with openssl (clients verify TLS);
- token authentication: ``admin`` (system:masters), ``viewer`` (bound by the
  tests to a read-only Role), ``runner`` (bound to kind/manifests/rbac.yaml's
  roles) and ``nobody`` (no binding at all);
- RBAC authorization, so a token without rights gets a real 403;
- service-account keys generated here (1.20 requires a signing key and issuer).

There is no kubelet, scheduler or controller-manager: :mod:`k8s_sim` plays
those parts. The server is stopped by PID, never by name.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic_chaos.host.etcd import EtcdServer, free_port

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BINARY = REPO / ".k8s-testenv" / "bin" / "kube-apiserver"
BINARY_VAR = "ELASTIC_CHAOS_KUBE_APISERVER"

TOKENS = {"admin": "admin-token-elastic-chaos", "viewer": "viewer-token-elastic-chaos",
          "runner": "runner-token-elastic-chaos", "nobody": "nobody-token-elastic-chaos"}


def find_binary() -> Path | None:
    explicit = os.environ.get(BINARY_VAR)
    path = Path(explicit) if explicit else DEFAULT_BINARY
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(folder: Path) -> None:
    """CA, serving cert for 127.0.0.1/localhost, service-account key pair."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "2", "-subj", "/CN=elastic-chaos-test-ca", cwd=folder)
    (folder / "san.cnf").write_text(
        "[ext]\nsubjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=localhost", cwd=folder)
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.crt", "-days", "2", "-extfile", "san.cnf", "-extensions", "ext", cwd=folder)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=folder)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=folder)


@dataclass
class ApiServer:
    """kube-apiserver + its etcd; ``start()`` blocks until /readyz answers."""

    work_dir: Path
    binary: Path
    ready_timeout_s: float = 90.0
    port: int = 0
    etcd: EtcdServer | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.work_dir / "pki" / "ca.crt"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> None:
        pki = self.work_dir / "pki"
        make_pki(pki)
        (self.work_dir / "tokens.csv").write_text(
            f'{TOKENS["admin"]},admin,uid-admin,"system:masters"\n'
            f"{TOKENS['viewer']},viewer,uid-viewer\n{TOKENS['runner']},runner,uid-runner\n"
            f"{TOKENS['nobody']},nobody,uid-nobody\n")
        self.etcd = EtcdServer(self.work_dir / "etcd-data", log_path=self.work_dir / "etcd.log")
        self.etcd.start()
        self.port = free_port()
        log = open(self.work_dir / "kube-apiserver.log", "ab")
        self._proc = subprocess.Popen(self._command(pki), stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self._wait_ready()

    def _command(self, pki: Path) -> list[str]:
        return [
            str(self.binary), f"--etcd-servers={self.etcd.url if self.etcd else ''}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
            "--insecure-port=0", f"--tls-cert-file={pki / 'server.crt'}",
            f"--tls-private-key-file={pki / 'server.key'}", f"--client-ca-file={pki / 'ca.crt'}",
            f"--token-auth-file={self.work_dir / 'tokens.csv'}", "--authorization-mode=RBAC",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.96.0.0/16",
            # no controller-manager creates the default service account: do not require it
            "--disable-admission-plugins=ServiceAccount",
            "--kubelet-preferred-address-types=InternalIP", "--enable-priority-and-fairness=false",
            # pods are watched straight from etcd, so compacting etcd (compact_etcd) expires an old
            # resourceVersion the way a long-lived watch meets 410 Gone on a real cluster
            "--watch-cache-sizes=pods#0",
            "--profiling=false", "--logtostderr=true", "-v=1",
        ]

    def _wait_ready(self) -> None:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"kube-apiserver exited ({self._proc.returncode}):\n{self.log_tail()}")
            req = urllib.request.Request(f"{self.url}/readyz",
                                         headers={"Authorization": f"Bearer {TOKENS['admin']}"})
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"kube-apiserver not ready within {self.ready_timeout_s:.0f}s:\n{self.log_tail()}")

    def compact_etcd(self) -> int:
        """Compact etcd's history up to now (the apiserver does this every 5 minutes);
        returns the revision. A pod watch resuming from before it gets 410 Gone."""
        assert self.etcd is not None
        rev = int(_etcd_v3(self.etcd.url, "range", {"key": "AA=="})["header"]["revision"])
        _etcd_v3(self.etcd.url, "compaction", {"revision": rev, "physical": True})
        return rev

    def log_tail(self, lines: int = 30) -> str:
        path = self.work_dir / "kube-apiserver.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def kubeconfig(self, user: str = "admin") -> Path:
        """A kubeconfig file for ``user`` (what ``--kubeconfig`` users pass)."""
        path = self.work_dir / f"kubeconfig-{user}.yaml"
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: test\n  cluster:\n    server: {self.url}\n"
            f"    certificate-authority: {self.ca_file}\n"
            f"users:\n- name: {user}\n  user:\n    token: {TOKENS[user]}\n"
            f"contexts:\n- name: {user}@test\n  context:\n    cluster: test\n    user: {user}\n"
            f"current-context: {user}@test\n")
        return path

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the apiserver by PID (SIGTERM, then SIGKILL), then its etcd. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout_s)
        if self.etcd is not None:
            self.etcd.stop()


def _etcd_v3(url: str, call: str, body: dict[str, object]) -> dict[str, Any]:
    req = urllib.request.Request(f"{url}/v3/kv/{call}", data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        out: dict[str, Any] = json.load(r)
        return out


def api_client(server: ApiServer, user: str = "admin") -> Any:
    """A kubernetes ApiClient for ``user``, built from a kubeconfig file as users do."""
    from kubernetes import config
    return config.new_client_from_config(config_file=str(server.kubeconfig(user)))


def until(what: str, check: Any, timeout_s: float = 15.0) -> Any:
    """Poll ``check()`` until it is truthy (returning it) or fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def load_yaml(path: Path) -> list[dict[str, Any]]:
    import yaml
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def openssl_available() -> bool:
    return shutil.which("openssl") is not None
