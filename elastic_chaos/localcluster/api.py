"""The few API calls the cluster tooling makes itself (stdlib only: no kubernetes client needed).

Readiness of the API server, the nodes' Ready condition, a Node deletion (what
a cloud's node lifecycle controller does when an instance is gone), the
default ServiceAccount (pods are refused until the token controller made it)
and the cluster's profile ConfigMap.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

from elastic_chaos.localcluster.base import ClusterError, Layout
from elastic_chaos.localcluster.pki import LOCAL_SERVER


class Api:
    """Admin client for the cluster's API server on 127.0.0.1. Every call is bounded by ``timeout_s``."""

    def __init__(self, layout: Layout, timeout_s: float = 5.0, server: str = LOCAL_SERVER) -> None:
        self.timeout_s = timeout_s
        self.server = server
        self._ctx = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
        self._ctx.load_cert_chain(str(layout.pki / "admin.crt"), str(layout.pki / "admin.key"))

    def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                content_type: str = "application/json") -> tuple[int, bytes]:
        """(status, body); an HTTP error status is returned, a connection failure raises ClusterError."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, method=method, data=data,
                                     headers={"Content-Type": content_type} if data else {})
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=self.timeout_s) as resp:
                return int(resp.status), bytes(resp.read())
        except urllib.error.HTTPError as e:
            return int(e.code), bytes(e.read())
        except (urllib.error.URLError, OSError) as e:
            raise ClusterError(f"API server {self.server} unreachable: {e}") from e

    def get(self, path: str) -> dict[str, Any] | None:
        """The decoded object, None on 404; ClusterError on any other error status."""
        status, body = self.request("GET", path)
        if status == 404:
            return None
        if status != 200:
            raise ClusterError(f"GET {path}: HTTP {status}: {body[:300]!r}")
        data = json.loads(body)
        assert isinstance(data, dict)
        return data

    def ready(self) -> bool:
        """True when /readyz answers ok (False while starting or unreachable)."""
        try:
            status, body = self.request("GET", "/readyz")
        except ClusterError:
            return False
        return status == 200 and body.strip() == b"ok"

    def node_ready(self) -> dict[str, bool]:
        """Every Node object's name -> whether its Ready condition is True."""
        nodes = self.get("/api/v1/nodes") or {}
        result: dict[str, bool] = {}
        for item in nodes.get("items", []):
            conds = item.get("status", {}).get("conditions", [])
            result[item["metadata"]["name"]] = any(c["type"] == "Ready" and c["status"] == "True" for c in conds)
        return result

    def delete_node(self, name: str) -> bool:
        """Delete the Node object; True if it was there, False if already gone (idempotent)."""
        status, body = self.request("DELETE", f"/api/v1/nodes/{name}")
        if status in (200, 202):
            return True
        if status == 404:
            return False
        raise ClusterError(f"DELETE node {name}: HTTP {status}: {body[:300]!r}")

    def set_pod_cidr(self, name: str, cidr: str) -> bool:
        """Set the Node's spec.podCIDR(s) once it is registered (what a cloud's IPAM controller does);
        True when set now or already. The kubelet polls for it and, once there, reports its status
        at once instead of at its next 10 s status update: the node is Ready ~10 s sooner."""
        node = self.get(f"/api/v1/nodes/{name}")
        if node is None:
            return False
        if node.get("spec", {}).get("podCIDR"):
            return True
        status, body = self.request("PATCH", f"/api/v1/nodes/{name}",
                                    {"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}},
                                    "application/strategic-merge-patch+json")
        if status != 200:
            raise ClusterError(f"PATCH node {name} podCIDR: HTTP {status}: {body[:300]!r}")
        return True

    def put_configmap(self, namespace: str, name: str, data: dict[str, str]) -> None:
        """Create or replace a ConfigMap (idempotent)."""
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
                "data": data}
        status, text = self.request("PUT", f"/api/v1/namespaces/{namespace}/configmaps/{name}", body)
        if status == 404:
            status, text = self.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", body)
        if status not in (200, 201):
            raise ClusterError(f"writing ConfigMap {namespace}/{name}: HTTP {status}: {text[:300]!r}")

    def has_default_sa(self) -> bool:
        """True once the default ServiceAccount of namespace default exists (pods are admitted)."""
        return self.get("/api/v1/namespaces/default/serviceaccounts/default") is not None
