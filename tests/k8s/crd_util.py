"""Install CRD files on an API server and wait until they are Established."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml
from k8s_testenv import REPO

CRD_DIR = REPO / "kind" / "manifests" / "crds"


def install_crds(api_client: Any, paths: list[Path], timeout_s: float = 30.0) -> list[str]:
    from kubernetes import client
    ext = client.ApiextensionsV1Api(api_client)
    names = []
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            try:
                ext.create_custom_resource_definition(doc, _preload_content=False)
            except Exception as exc:
                if getattr(exc, "status", None) != 409:
                    raise
            names.append(doc["metadata"]["name"])
    deadline = time.monotonic() + timeout_s
    for name in names:
        while not established(ext, name):
            if time.monotonic() > deadline:
                raise AssertionError(f"CRD {name} not Established within {timeout_s}s")
            time.sleep(0.1)
    # the new resources take a moment to be served by discovery
    time.sleep(0.5)
    return names


def established(ext: Any, name: str) -> bool:
    crd = json.loads(ext.read_custom_resource_definition(name, _preload_content=False).data)
    return any(c["type"] == "Established" and c["status"] == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])
