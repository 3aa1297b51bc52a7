"""Kubernetes/kind platform options from flat keywords: pytest's ``elastic_job(...)`` and CLI flags.

``elastic_job(nodes="1:2", job_kind="pytorchjob", gpus_per_node=8)`` mixes job
options (JobSpec), cluster settings (KubeSettings) and platform options
(KubernetesOptions); this sorts the last two out, converts the plain values a
test or a command line gives (strings, dicts, lists) into the typed fields,
and names every accepted option when one is unknown.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from chaos.errors import SpecError
from chaos.platforms.kubernetes import manifests as m
from chaos.platforms.kubernetes.kind import KindOptions
from chaos.platforms.kubernetes.platform import KubernetesOptions

SETTINGS = {f.name for f in dataclasses.fields(m.KubeSettings)}


def _option_names(kind: bool) -> set[str]:
    cls = KindOptions if kind else KubernetesOptions
    return {f.name for f in dataclasses.fields(cls)} - {"settings"}


def platform_options(platform: str, options: dict[str, Any], **defaults: Any) -> dict[str, Any]:
    """Consume ``options`` into ``{"options": KubernetesOptions | KindOptions}``.

    ``defaults`` (kubeconfig, context, namespace, job_kind, image: the pytest
    command-line flags) apply where the keywords do not say otherwise. Raises
    TypeError naming the accepted options for an unknown one.
    """
    kind = platform == "kind"
    given = {k: v for k, v in defaults.items() if v is not None}
    settings_kw = {k: _setting(k, options.pop(k)) for k in list(options) if k in SETTINGS}
    for key in ("namespace", "job_kind", "image"):
        if key in given:
            settings_kw.setdefault(key, _setting(key, given.pop(key)))
    names = _option_names(kind)
    option_kw = {k: options.pop(k) for k in list(options) if k in names}
    for key, value in given.items():
        if key in names:
            option_kw.setdefault(key, value)
    if options:
        raise TypeError(f"unknown option(s) for --platform {platform}: {sorted(options)}; cluster settings are "
                        f"{sorted(SETTINGS)}, platform options {sorted(names)}")
    base = m.kind_settings() if kind else m.KubeSettings()
    settings = dataclasses.replace(base, **settings_kw)
    cls = KindOptions if kind else KubernetesOptions
    return {"options": cls(settings=settings, **option_kw)}


def _setting(key: str, value: Any) -> Any:
    """Plain values (from a test or a command line) -> the typed KubeSettings field."""
    if key == "job_kind" and not isinstance(value, m.JobKind):
        try:
            return m.JobKind(str(value).lower())
        except ValueError:
            raise SpecError(f"job_kind {value!r}: choose elasticjob or pytorchjob") from None
    if key in ("node_selector", "etcd_node_selector") and isinstance(value, Mapping):
        return tuple(value.items())
    if key == "tolerations":
        return tuple(parse_toleration(t) if isinstance(t, str) else t for t in value)
    if key == "storage" and isinstance(value, Mapping):
        return m.CheckpointStorage(**{**value, "kind": m.StorageKind(value.get("kind", "pvc"))})
    return value


def parse_toleration(text: str) -> m.Toleration:
    """``key=value:Effect`` or ``key:Effect`` (operator Exists) -> Toleration."""
    spec, _, effect = text.partition(":")
    key, eq, value = spec.partition("=")
    if not key or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise SpecError(f"toleration {text!r}: write key=value:NoSchedule (or key:NoSchedule for any value)")
    return m.Toleration(key=key, value=value if eq else None, effect=effect,
                        operator="Equal" if eq else "Exists")


def parse_pairs(items: list[str] | None, what: str) -> tuple[tuple[str, str], ...]:
    """``["k=v", ...]`` -> ((k, v), ...), for node selectors."""
    out = []
    for item in items or []:
        key, eq, value = item.partition("=")
        if not key or not eq:
            raise SpecError(f"{what} {item!r}: write key=value")
        out.append((key, value))
    return tuple(out)
