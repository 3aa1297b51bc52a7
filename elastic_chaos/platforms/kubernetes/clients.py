"""The API objects a Kubernetes run uses: injected ones (tests aim them at a real API server), else
built from a kubeconfig (or in-cluster credentials). The only place the platform imports the
kubernetes client package.

Exec streams get an ApiClient of their own (:func:`exec_core_v1`): ``kubernetes.stream.stream()``
swaps the call method of the ApiClient it is given for its websocket one while it opens the
stream, so every other thread's request on that client in the meantime goes through the websocket
path too. On the client the pod watch shared, a watch's list failed "Handshake status 400 Bad
Request" and failed a scenario whose hypothesis held (issue 25).
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elastic_chaos.errors import SetupError

if TYPE_CHECKING:
    from elastic_chaos.platforms.kubernetes.options import KubernetesOptions


def make_clients(options: KubernetesOptions, api_client: Any, core_v1: Any, apps_v1: Any, custom: Any,
             policy: Any) -> tuple[Any, Any, Any, Any]:
    """The API objects to use: the injected ones, else built from the kubeconfig."""
    if all(c is not None for c in (core_v1, apps_v1, custom)):
        return core_v1, apps_v1, custom, policy
    try:
        from kubernetes import client, config
    except ImportError as exc:
        raise SetupError("the kubernetes platform needs the kubernetes client: "
                         "pip install 'elastic-chaos[kubernetes]' (make install does)") from exc
    if api_client is None:
        api_client = api_client_from_config(options, client, config)
    return (core_v1 or client.CoreV1Api(api_client), apps_v1 or client.AppsV1Api(api_client),
            custom or client.CustomObjectsApi(api_client), policy or client.PolicyV1Api(api_client))


def api_client_from_config(options: KubernetesOptions, client: Any, config: Any) -> Any:
    path = options.kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if options.kubeconfig and not Path(options.kubeconfig).is_file():
        raise SetupError(f"--kubeconfig {options.kubeconfig} is not a file")
    first = Path(path.split(os.pathsep)[0])
    if first.is_file() and os.pathsep not in path:   # one file: the reader --kubeconfig's goes through
        from elastic_chaos.platforms.kubernetes.kubeconfig import check
        check(first, options.context)
    try:
        if first.is_file():
            return config.new_client_from_config(config_file=path, context=options.context)
        config.load_incluster_config()
        return client.ApiClient()
    except Exception as exc:  # ConfigException and friends: say what to do
        raise SetupError(f"no usable Kubernetes credentials ({exc}); pass --kubeconfig PATH "
                         "(and --kube-context), set KUBECONFIG, or run inside the cluster") from exc



@contextlib.contextmanager
def exec_core_v1(core_v1: Any) -> Iterator[Any]:
    """A CoreV1Api on a new ApiClient for one exec stream, closed when the block ends.

    It shares only the configuration (server, credentials, TLS) with ``core_v1``'s client, so the
    stream's swap of the call method touches no client another thread uses (a watch, a log
    follower, a second exec: two overlapping swaps on one client can leave it swapped for good).
    A ``core_v1`` without an ``api_client`` (not the kubernetes package's) is used as it is."""
    source = getattr(core_v1, "api_client", None)
    configuration = getattr(source, "configuration", None)
    if configuration is None:
        yield core_v1
        return
    from kubernetes import client
    own: Any = client.ApiClient(configuration=configuration)
    own.default_headers.update(getattr(source, "default_headers", None) or {})
    try:
        yield client.CoreV1Api(own)
    finally:
        own.close()


def custom_objects_api(kubeconfig: str | None, context: str | None) -> Any:
    """A CustomObjectsApi from a kubeconfig (or in-cluster credentials)."""
    try:
        from kubernetes import client
        from kubernetes import config as kube_config
    except ImportError as exc:
        raise SetupError("the kubernetes platform needs the kubernetes client: "
                         "pip install 'elastic-chaos[kubernetes]' (make install does)") from exc
    config: Any = kube_config  # untyped module
    path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    try:
        if Path(path.split(os.pathsep)[0]).is_file():
            return client.CustomObjectsApi(config.new_client_from_config(config_file=path, context=context))
        config.load_incluster_config()
        return client.CustomObjectsApi(client.ApiClient())
    except Exception as exc:  # noqa: BLE001 - ConfigException and friends: say what to do
        raise SetupError(f"no usable Kubernetes credentials ({exc}); pass --kubeconfig PATH "
                         "(and --kube-context), set KUBECONFIG, or run inside the cluster") from exc


def core_v1_api_of(custom: Any) -> Any:
    """A CoreV1Api on the same ApiClient as ``custom`` (a CustomObjectsApi)."""
    from kubernetes import client
    return client.CoreV1Api(custom.api_client)


def apps_v1_api_of(custom: Any) -> Any:
    """An AppsV1Api on the same ApiClient as ``custom``."""
    from kubernetes import client
    return client.AppsV1Api(custom.api_client)


def core_v1_api(kubeconfig: str | None, context: str | None) -> Any:
    """A CoreV1Api from a kubeconfig (or in-cluster credentials), by the same rules."""
    return core_v1_api_of(custom_objects_api(kubeconfig, context))


def exec_stream() -> Any:
    """kubernetes.stream.stream, which opens a pod exec's websocket (give it a client of its
    own: ``exec_core_v1``)."""
    try:
        from kubernetes.stream import stream
    except ImportError as exc:  # pragma: no cover - installed with the kubernetes extra
        raise SetupError("exec needs the kubernetes client: pip install 'elastic-chaos[kubernetes]'") from exc
    return stream
