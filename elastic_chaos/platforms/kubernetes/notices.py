"""Spot notices on a cluster without EC2: an instance-metadata stand-in that pods reach.

On EC2 a training script learns of a spot reclaim from the instance metadata
service (IMDSv2: PUT a token, GET ``/latest/meta-data/spot/instance-action``
and ``.../events/recommendations/rebalance``, 404 until they exist), and the
reference trainer polls it (elastic_chaos/trainer/spot_notice.py). Here one server in this
process plays every machine's IMDS: it listens where the pods can reach this
machine (the local cluster's bridge address, ports its firewall opens) and
answers each request with the notices of the machine the requesting pod runs
on, found from the pod's IP. Pods find it through
``AWS_EC2_METADATA_SERVICE_ENDPOINT``, the variable the AWS SDKs read.
"""
from __future__ import annotations

import datetime
import json
import secrets
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from elastic_chaos.errors import SetupError

TOKEN_PATH = "/latest/api/token"
INSTANCE_ACTION_PATH = "/latest/meta-data/spot/instance-action"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class NoticeServer:
    """The IMDS stand-in of every machine; ``machine_of(ip)`` names the machine of a requesting
    pod (None: unknown, answered 404). ``close()`` is idempotent."""

    def __init__(self, host: str, ports: tuple[int, int], machine_of: Callable[[str], str | None]) -> None:
        self.machine_of = machine_of
        self._docs: dict[tuple[str, str], dict[str, Any]] = {}
        self._tokens: set[str] = set()
        self._lock = threading.Lock()
        self.requests: list[tuple[str, str, str | None, int]] = []
        """(method, path, machine, status) of every request, for tests and reports."""
        self._server = _bind(host, ports, self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="imds-stand-in", daemon=True)
        self._closed = False

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> NoticeServer:
        self._thread.start()
        return self

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()

    def recommend_rebalance(self, machine: str, at: float) -> None:
        with self._lock:
            self._docs[(machine, REBALANCE_PATH)] = {"noticeTime": _iso(at)}

    def announce_interruption(self, machine: str, terminate_at: float, action: str = "terminate") -> None:
        with self._lock:
            self._docs[(machine, INSTANCE_ACTION_PATH)] = {"action": action, "time": _iso(terminate_at)}

    def _answer(self, method: str, path: str, client: str, headers: Any) -> tuple[int, str]:
        machine = self.machine_of(client)
        if method == "PUT":
            if path != TOKEN_PATH:
                return 404, ""
            if not headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                return 400, "missing X-aws-ec2-metadata-token-ttl-seconds"
            token = secrets.token_urlsafe(24)
            with self._lock:
                self._tokens.add(token)
            return 200, token
        with self._lock:
            authorized = headers.get("X-aws-ec2-metadata-token") in self._tokens
            doc = self._docs.get((machine or "", path))
        if not authorized:
            return 401, ""
        return (404, "") if doc is None else (200, json.dumps(doc))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                pass

            def _serve(self) -> None:
                status, body = outer._answer(self.command, self.path, self.client_address[0], self.headers)
                outer.requests.append((self.command, self.path, outer.machine_of(self.client_address[0]), status))
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if body.startswith("{") else "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = _serve  # noqa: N815 - stdlib naming

        return Handler


def _bind(host: str, ports: tuple[int, int], handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """A server on the first free port of ``ports`` (inclusive) at ``host``."""
    last: OSError | None = None
    for port in range(ports[0], ports[1] + 1):
        try:
            server = ThreadingHTTPServer((host, port), handler)
            server.daemon_threads = True
            return server
        except OSError as exc:
            last = exc
    raise SetupError(f"the spot-notice stand-in could not listen on {host}:{ports[0]}-{ports[1]} ({last}): is that "
                     "this machine's address on the pods' network (the cluster profile's metadata-address), and "
                     "are those ports free?")


def port_range(text: str) -> tuple[int, int]:
    """``HOST[:PORT[-PORT]]``'s ports (0-0: any free port)."""
    _, _, ports = text.partition(":")
    low, _, high = ports.partition("-")
    return (int(low or 0), int(high or low or 0))

