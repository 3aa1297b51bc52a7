"""Keep a local copy of Kubernetes objects current: list once, then watch, forever.

A watch stream ends all the time (the server's timeout, a proxy, an apiserver
restart). Each new stream resumes from the last ``resourceVersion`` seen
(events or bookmarks), so nothing is missed and nothing is seen twice. When
that version is too old for the server (``410 Gone``, as an HTTP status or as
an ``ERROR`` event inside the stream) the watch lists again and turns the
difference between its copy and the fresh list into synthetic ADDED /
MODIFIED / DELETED events: the consumer sees a consistent sequence either way.

Works on raw JSON (``_preload_content=False``), so it needs only the list
function of an injected client, never the kubernetes package itself.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from elastic_chaos.errors import PlatformError
from elastic_chaos.waiting import eventually

log = logging.getLogger(__name__)

K8sObject = dict[str, Any]
"""A raw Kubernetes object (``metadata``, ``spec``, ``status``) as the API returns it."""
OnEvent = Callable[[str, K8sObject], None]

GONE = 410


def api_status(exc: BaseException) -> int | None:
    """The HTTP status of a Kubernetes client error (ApiException.status), else None."""
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) and status > 0 else None


def api_message(exc: BaseException) -> str:
    """The server's message in a client error (its Status body), or the error's text."""
    body = getattr(exc, "body", None)
    if body:
        try:
            message = json.loads(body).get("message")
            if message:
                return str(message)
        except (ValueError, AttributeError):
            pass
    return str(getattr(exc, "reason", None) or exc).strip()


def is_transient(exc: BaseException) -> bool:
    """An HTTP answer or a network failure (worth retrying), not a bug in the call."""
    return (api_status(exc) is not None or isinstance(exc, OSError)
            or type(exc).__module__.startswith(("urllib3", "http.client", "ssl")))


def read_json(resp: Any) -> Any:
    """The JSON body of a raw (``_preload_content=False``) response."""
    return json.loads(resp.data)


def key_of(obj: K8sObject) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def _rv(obj: K8sObject) -> str | None:
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    return str(rv) if rv else None


def iter_lines(resp: Any) -> Iterator[bytes]:
    """Complete lines of a chunked streaming response, as they arrive."""
    pending = b""
    for chunk in resp.stream(None, decode_content=False):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from (line for line in lines if line.strip())
    if pending.strip():
        yield pending


class _Expired(Exception):
    """The resourceVersion we resume from is older than the server keeps."""


class ObjectWatch:
    """List + watch one kind of object in a background thread.

    ``on_event(type, obj)`` is called from that thread for every change, in
    order (type: ADDED, MODIFIED, DELETED). ``start()`` blocks until the first
    list is delivered. ``stop()`` ends the thread within about ``window_s`` and
    re-raises the error that killed it, if any. Connection failures are retried
    from the last resourceVersion; failing for ``give_up_s`` in a row kills the
    watch (and ``stop()`` says why).
    """

    def __init__(self, name: str, list_fn: Callable[..., Any], on_event: OnEvent, *,
                 window_s: int = 10, retry_s: float = 0.5, give_up_s: float = 120.0,
                 **list_kwargs: Any) -> None:
        self.name = name
        self._list_fn = list_fn
        self._on_event = on_event
        self._kwargs = list_kwargs
        self.window_s = window_s
        self._retry_s = retry_s
        self._give_up_s = give_up_s
        self.resource_version: str | None = None
        self.objects: dict[str, K8sObject] = {}
        self.streams = 0    # watch requests made (each resumes from resource_version)
        self.relists = 0    # lists after a 410 Gone
        self.errors = 0     # streams that failed (and were retried)
        self._stop = threading.Event()
        self._listed = threading.Event()
        self._lock = threading.Lock()
        self._resp: Any = None
        self._generation = 0
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def error(self) -> BaseException | None:
        """What killed the watch thread, if it died (``stop()`` raises it)."""
        return self._error

    # -- lifecycle ------------------------------------------------------------
    def start(self, timeout_s: float = 30.0) -> ObjectWatch:
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.name}", daemon=True)
        self._thread.start()
        if not self._listed.wait(timeout_s) or self._error is not None:
            error, self._error = self._error, None
            self._stop.set()
            self.force_reconnect()
            self._thread.join(self.window_s + 10)
            why = f"HTTP {api_status(error)} {api_message(error)}" if error else f"no answer in {timeout_s:.0f}s"
            raise PlatformError(f"could not list {self.name}: {why}") from error
        return self

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop the thread; raise PlatformError with the cause if it died. Idempotent."""
        self._stop.set()
        self.force_reconnect()
        if self._thread is not None:
            self._thread.join(timeout_s if timeout_s is not None else self.window_s + 10)
            if self._thread.is_alive():
                raise PlatformError(f"watch of {self.name} did not stop")
        if self._error is not None:
            raise PlatformError(f"watch of {self.name} failed: {self._error}") from self._error

    def wait_streaming(self, timeout_s: float = 10.0) -> bool:
        """Block until a watch stream is open (tests cut it deliberately)."""
        def streaming() -> bool:
            with self._lock:
                return self._resp is not None

        return eventually(streaming, timeout_s=timeout_s, interval_s=0.02)

    def force_reconnect(self) -> None:
        """Cut the current stream (as a flaky network would); the watch resumes by itself.
        Nothing that arrives on the cut stream afterwards is delivered."""
        with self._lock:
            resp = self._resp
            self._generation += 1
        if resp is not None:
            _shutdown(resp)

    # -- the loop -------------------------------------------------------------
    def _run(self) -> None:
        failing_since: float | None = None
        try:
            self._relist()
            self._listed.set()
            while not self._stop.is_set():
                try:
                    self._stream()
                    failing_since = None
                except _Expired:
                    self._relist()
                except Exception as exc:  # network, apiserver restart, ...
                    if self._stop.is_set():
                        return
                    if not is_transient(exc):
                        raise
                    if api_status(exc) == GONE:
                        self._relist()
                        continue
                    if api_status(exc) in (401, 403, 404):
                        raise
                    self.errors += 1
                    failing_since = failing_since or time.monotonic()
                    if time.monotonic() - failing_since > self._give_up_s:
                        raise
                    log.info("watch of %s broke (%s); resuming from %s", self.name, exc, self.resource_version)
                    self._stop.wait(self._retry_s)
        except BaseException as exc:
            log.exception("watch of %s failed", self.name)
            self._error = exc
            self._listed.set()

    def _relist(self) -> None:
        body = read_json(self._list_fn(**self._kwargs, _preload_content=False, _request_timeout=30))
        if self.resource_version is not None:
            self.relists += 1
        fresh = {key_of(o): o for o in body.get("items") or []}
        for key, gone in list(self.objects.items()):
            if key not in fresh:
                self._deliver("DELETED", gone)
        for key, obj in fresh.items():
            old = self.objects.get(key)
            if old is None:
                self._deliver("ADDED", _with_kind(obj, body))
            elif _rv(old) != _rv(obj):
                self._deliver("MODIFIED", _with_kind(obj, body))
        self.resource_version = str((body.get("metadata") or {}).get("resourceVersion") or "") or None

    def _stream(self) -> None:
        self.streams += 1
        resp = self._list_fn(**self._kwargs, watch=True, resource_version=self.resource_version,
                             allow_watch_bookmarks=True, timeout_seconds=self.window_s,
                             _preload_content=False, _request_timeout=(10, self.window_s + 10))
        with self._lock:
            self._resp = resp
            generation = self._generation
        try:
            for line in iter_lines(resp):
                if self._stop.is_set() or generation != self._generation:
                    return     # cut: what is left is read again from resource_version
                self._handle(json.loads(line))
        finally:
            with self._lock:
                self._resp = None
            _close(resp)

    def _handle(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == GONE:
                raise _Expired()
            raise PlatformError(f"watch of {self.name}: {obj.get('reason')}: {obj.get('message')}")
        rv = _rv(obj)
        if kind == "BOOKMARK":
            self.resource_version = rv or self.resource_version
            return
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self._deliver(str(kind), obj)
            self.resource_version = rv or self.resource_version

    def _deliver(self, kind: str, obj: K8sObject) -> None:
        key = key_of(obj)
        if kind == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        self._on_event(kind, obj)


def _with_kind(obj: K8sObject, listing: dict[str, Any]) -> K8sObject:
    """List items carry no kind; give them the one a watch event would have."""
    if "kind" not in obj and str(listing.get("kind", "")).endswith("List"):
        obj = {**obj, "kind": str(listing["kind"])[:-4]}
    return obj


def _shutdown(resp: Any) -> None:
    """Unblock a reader of ``resp`` from another thread."""
    import socket
    sock = getattr(getattr(resp, "connection", None), "sock", None)
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
        elif callable(getattr(resp, "shutdown", None)):   # urllib3 >= 2.3
            resp.shutdown()
    except (OSError, ValueError, RuntimeError):
        pass


def _close(resp: Any) -> None:
    try:
        resp.close()
        resp.release_conn()
    except Exception:  # noqa: BLE001 - closing a broken stream must not mask why it broke
        pass
