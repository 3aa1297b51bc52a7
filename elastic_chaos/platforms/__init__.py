"""Platform registry: names map to modules, imported only when chosen (heavy
clients such as kubernetes or boto3 stay unimported on the local platform)."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from elastic_chaos.errors import SpecError
from elastic_chaos.events import Timeline
from elastic_chaos.platforms.api import Platform

PLATFORMS: dict[str, tuple[str, str]] = {
    "local": ("elastic_chaos.platforms.local.platform", "LocalPlatform"),
    "kubernetes": ("elastic_chaos.platforms.kubernetes.platform", "KubernetesPlatform"),
    "kind": ("elastic_chaos.platforms.kubernetes.kind_cluster", "KindPlatform"),
    "eks": ("elastic_chaos.platforms.aws.eks", "EksPlatform"),
}


def platform_class(name: str) -> type[Platform]:
    """The Platform class registered as ``name`` (its module imported now)."""
    try:
        module_name, cls_name = PLATFORMS[name]
    except KeyError:
        raise SpecError(f"unknown platform {name!r}; choose one of {sorted(PLATFORMS)}") from None
    cls: type[Platform] = getattr(importlib.import_module(module_name), cls_name)
    return cls


def platform_option_classes(name: str) -> tuple[type, ...]:
    """The dataclasses whose fields are platform ``name``'s options (CLI flags, fixture keywords)."""
    return platform_class(name).option_classes()


def platform_options(name: str, values: dict[str, Any]) -> Any:
    """Platform ``name``'s options object (its class's ``Options``) from option values by name;
    SpecError for a bad one."""
    return platform_class(name).make_options(values)


def create_platform(name: str, timeline: Timeline, work_dir: Path, options: Any = None, **clients: Any) -> Platform:
    """Platform ``name`` for one run: ``options`` its options object (None: its defaults), ``clients``
    API clients a test injects (the kubernetes platform's)."""
    given = {"options": options} if options is not None else {}
    platform: Platform = platform_class(name)(timeline, work_dir, **given, **clients)
    return platform
