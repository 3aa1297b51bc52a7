"""The one way this toolkit talks to etcd's v2 API: a python-etcd client, set up to read
a store it does not own.

torch's ``etcd-v2`` rendezvous lives in etcd's v2 key space; the rendezvous watcher,
``elastic-chaos watch`` and the platforms that wait for an etcd to serve all read it
through ``client()``. python-etcd is used as it is, with its HTTP pool replaced by one
that never retries: urllib3's default retries a refused connection three times (with a
warning each) and a plain read that timed out three times, so a long poll could last
four times its window, a stop would wait for all of them, and an outage would be noticed
late. One log line of python-etcd is dropped (``Request to server ... failed``, logged at
ERROR for every failed request): the EtcdConnectionFailed raised right after it is what
callers act on, as an event or an error message.

Plain HTTP only: the rendezvous endpoints torch is given (``--rdzv-endpoint HOST:PORT``)
are plain HTTP. python-etcd itself can do TLS and basic auth (``protocol``, ``ca_cert``,
``cert``, ``username``/``password``) should that ever be needed.
"""
from __future__ import annotations

import logging
import socket
from http.client import HTTPException
from typing import Any

import etcd
import urllib3
from urllib3.exceptions import HTTPError
from urllib3.exceptions import TimeoutError as Urllib3Timeout

CLIENT_ERRORS: tuple[type[BaseException], ...] = (etcd.EtcdException, HTTPError, HTTPException, OSError,
                                                  ValueError)
"""What a read through ``client()`` can raise: python-etcd's errors, and for the few
requests it does not wrap (``version``) urllib3's, http.client's, a socket's, or a
body that is not JSON or not UTF-8."""


class _DropFailedRequestLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Request to server")


logging.getLogger("etcd.client").addFilter(_DropFailedRequestLines())


def client(endpoint: str, *, timeout_s: float) -> Any:
    """A python-etcd ``Client`` of the etcd at ``endpoint`` (HOST:PORT); requests time out
    after ``timeout_s`` (a watch passes its own ``timeout``). Connects nothing yet."""
    host, _, port = endpoint.rpartition(":")
    c = etcd.Client(host=host, port=int(port), read_timeout=timeout_s)
    c.http = urllib3.PoolManager(num_pools=1, maxsize=2, timeout=timeout_s, retries=False)
    return c


def is_timeout(exc: BaseException) -> bool:
    """Whether a failed request only ran out of time (the server may be busy or paused)."""
    if isinstance(exc, etcd.EtcdWatchTimedOut):
        return True
    cause = getattr(exc, "cause", None) or exc
    return isinstance(cause, (Urllib3Timeout, socket.timeout, TimeoutError))


def server_version(endpoint: str, *, timeout_s: float) -> str:
    """The etcd server's version (``/version``); "?" when the answer does not say.
    Raises one of CLIENT_ERRORS when nothing answers."""
    try:
        return str(client(endpoint, timeout_s=timeout_s).version)
    except (KeyError, TypeError):   # JSON, but not etcd's version document
        return "?"


def settled(endpoint: str, *, timeout_s: float) -> bool:
    """Whether a fresh etcd at ``endpoint`` (HOST:PORT) has made its own start-up writes: its member's attributes
    published and the cluster version decided. Each moves the v2 store's index; a v2 read is served
    before them, and on a loaded machine they land seconds later, inside whatever runs next (a test that
    counts the index saw one more write than its own). Never raises."""
    try:
        http = urllib3.PoolManager(timeout=urllib3.Timeout(total=timeout_s), retries=False)
        version = http.request("GET", f"http://{endpoint}/version").json()
        members = http.request("GET", f"http://{endpoint}/v2/members").json().get("members") or []
        return version.get("etcdcluster") not in (None, "", "not_decided") and bool(members) \
            and all(m.get("name") for m in members)
    except CLIENT_ERRORS + (AttributeError,):   # AttributeError: JSON, but not etcd's documents
        return False


def serves_v2(endpoint: str, *, timeout_s: float) -> bool:
    """Whether the etcd at ``endpoint`` answers a v2 read now (a serializable read of
    the root, which a fresh or quorum-less member answers too). Never raises."""
    try:
        client(endpoint, timeout_s=timeout_s).read("/", quorum=False)
        return True
    except CLIENT_ERRORS:
        return False
