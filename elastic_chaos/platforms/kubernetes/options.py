"""The Kubernetes platforms' options (:class:`KubernetesOptions`), and building them from flat values:
CLI flags and fixture keywords.

``run_hypothesis("kill-node", job_kind="pytorchjob", gpus_per_node=8)`` mixes
job options (JobSpec), cluster settings (KubeSettings) and platform options
(KubernetesOptions); elastic_chaos.options routes each name to its declaration, and
this module builds the platform's options from the last two, converting the
plain values a test or a command line gives (strings, dicts, lists) into the
typed fields.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic_chaos.errors import SpecError
from elastic_chaos.options import DAY_S, option, validate
from elastic_chaos.platforms.api import NodePool
from elastic_chaos.platforms.kubernetes import manifests as m

SETTINGS = {f.name for f in dataclasses.fields(m.KubeSettings)}


@dataclass(frozen=True)
class KubernetesOptions(NodePool):
    """Settings of the kubernetes platform (its node pool's, and these)."""

    kubeconfig: str | None = option(None, "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then "
                                          "in-cluster credentials)", metavar="PATH")
    context: str | None = option(None, "kubeconfig context (default: its current context)", flag="--kube-context",
                                 metavar="NAME")
    settings: m.KubeSettings = field(default_factory=m.KubeSettings)
    """Namespace, job kind, image, resources, placement, checkpoint storage."""
    etcd_endpoint: str | None = option(None, "HOST:PORT of the job's etcd as reachable from here (a NodePort, "
                                             "a load balancer); default: the in-cluster Service address when "
                                             "running in a pod, else `kubectl port-forward`", metavar="HOST:PORT")
    start_timeout_s: float = option(300.0, "how long starting waits for every worker pod to run (image pulls, "
                                           "autoscaling)", flag="--start-timeout", above=0, units="s", maximum=DAY_S)
    stop_timeout_s: float = option(60.0, "how long stopping waits for the run's pods to be gone",
                                   flag="--stop-timeout", above=0, units="s", maximum=DAY_S)
    watch_window_s: int = option(10, "server-side timeout of each watch request; the next one resumes where it "
                                     "ended", minimum=1, cli=False, maximum=3600)
    kubectl: str = option("kubectl", "kubectl used for the etcd port-forward only", cli=False)
    provisioning_delay_s: float | None = option(None, "hold a lost worker's replacement back this long: on a "
                                                      "cluster whose machines we operate, a new machine is "
                                                      "asked for this long after one is lost; elsewhere the "
                                                      "job is scaled down, then up (the autoscaler's minutes); "
                                                      "default: at once",
                                                flag="--provisioning-delay", minimum=0, units="s", maximum=DAY_S)
    metadata_address: str | None = option(None, "HOST[:PORT[-PORT]] where pods reach this machine: the spot-notice "
                                                "stand-in (an instance metadata service) listens there; default: "
                                                "the cluster profile's (the local cluster's bridge)",
                                          metavar="HOST:PORTS")
    cluster_profile: bool = option(True, "take this cluster's own defaults (image, capacity, storage, DNS, who "
                                         "operates its machines) from its kube-public/elastic-chaos-cluster "
                                         "ConfigMap when it has one (make cluster-up writes it)", cli=False)

    def __post_init__(self) -> None:
        validate(self)
        if self.kubeconfig is not None:   # read as the client will, before a run starts (file, line, reason)
            from elastic_chaos.platforms.kubernetes.kubeconfig import check
            check(Path(self.kubeconfig).expanduser(), self.context)



def make_options(cls: type, values: dict[str, Any], *, kind: bool = False) -> Any:
    """``cls`` (KubernetesOptions or a subclass) from flat option values: the cluster
    settings (KubeSettings' fields: namespace, job_kind, image, ...) go into its
    ``settings``, on kind/'s defaults for kind; plain values (strings, dicts, lists
    from a test or a command line) become the typed fields."""
    settings_kw = {k: _setting(k, values.pop(k)) for k in list(values) if k in SETTINGS}
    base = m.kind_settings() if kind else m.KubeSettings()
    return cls(settings=dataclasses.replace(base, **settings_kw), **values)


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
