"""Platform registry: names map to modules, imported only when chosen (heavy
clients such as kubernetes or boto3 stay unimported on the local platform)."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from chaos.errors import SpecError
from chaos.events import Timeline
from chaos.platforms.api import Platform

PLATFORMS: dict[str, tuple[str, str]] = {
    "local": ("chaos.platforms.local.platform", "LocalPlatform"),
    "kubernetes": ("chaos.platforms.kubernetes.platform", "KubernetesPlatform"),
    "kind": ("chaos.platforms.kubernetes.kind", "KindPlatform"),
    "eks": ("chaos.platforms.aws.eks", "EksPlatform"),
}


def create_platform(name: str, timeline: Timeline, work_dir: Path, **options: Any) -> Platform:
    try:
        module_name, cls_name = PLATFORMS[name]
    except KeyError:
        raise SpecError(f"unknown platform {name!r}; choose one of {sorted(PLATFORMS)}") from None
    cls = getattr(importlib.import_module(module_name), cls_name)
    platform: Platform = cls(timeline, work_dir, **options)
    return platform
