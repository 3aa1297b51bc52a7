"""A loopback stand-in for the EC2 instance metadata service, one per local node.

On EC2 a spot reclaim is announced through IMDS before it happens (a
rebalance recommendation, then the two-minute interruption notice), and a
well-behaved training script polls it. So that the same trainer code runs
on the local platform, each node gets its own stand-in speaking the same
IMDSv2 protocol (PUT a token, GET with it; 404 until a notice exists) and
the node's processes find it through ``AWS_EC2_METADATA_SERVICE_ENDPOINT``,
the variable the AWS SDKs read. Only the documents spot handling needs are
served.
"""
from __future__ import annotations

import datetime
import json
import secrets
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

TOKEN_PATH = "/latest/api/token"
INSTANCE_ACTION_PATH = "/latest/meta-data/spot/instance-action"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class MetadataStandIn:
    """Serves one node's spot notices. ``close()`` is idempotent."""

    def __init__(self, node: str, listener: socket.socket | None = None) -> None:
        self.node = node
        self._docs: dict[str, dict[str, Any]] = {}
        self._tokens: set[str] = set()
        self._lock = threading.Lock()
        self.requests: list[tuple[str, str, int]] = []
        """(method, path, status) of every request, for tests and reports."""
        # one thread per node serves its requests in turn: a few tiny GETs a second,
        # not worth a thread each (the toolkit must not perturb what it measures)
        self._server = HTTPServer(("127.0.0.1", 0), self._handler(), bind_and_activate=listener is None)
        if listener is not None:
            self._server.socket.close()
            self._server.socket = listener
            self._server.server_address = listener.getsockname()
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"imds-{node}", daemon=True)
        self._closed = False

    @property
    def endpoint(self) -> str:
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}"

    def start(self) -> MetadataStandIn:
        self._thread.start()
        return self

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()

    def recommend_rebalance(self, at: float) -> None:
        """Publish a rebalance recommendation noticed at ``at``."""
        with self._lock:
            self._docs[REBALANCE_PATH] = {"noticeTime": _iso(at)}

    def announce_interruption(self, terminate_at: float, action: str = "terminate") -> None:
        """Publish the interruption notice: the instance goes away at ``terminate_at``."""
        with self._lock:
            self._docs[INSTANCE_ACTION_PATH] = {"action": action, "time": _iso(terminate_at)}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                pass

            def _reply(self, status: int, body: str = "", ctype: str = "text/plain") -> None:
                outer.requests.append((self.command, self.path, status))
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:  # noqa: N802 - stdlib naming
                if self.path != TOKEN_PATH:
                    self._reply(404)
                elif not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    self._reply(400, "missing X-aws-ec2-metadata-token-ttl-seconds")
                else:
                    token = secrets.token_urlsafe(24)
                    with outer._lock:
                        outer._tokens.add(token)
                    self._reply(200, token)

            def do_GET(self) -> None:  # noqa: N802 - stdlib naming
                with outer._lock:
                    authorized = self.headers.get("X-aws-ec2-metadata-token") in outer._tokens
                    doc = outer._docs.get(self.path)
                if not authorized:
                    self._reply(401)
                elif doc is None:
                    self._reply(404)
                else:
                    self._reply(200, json.dumps(doc), "application/json")

        return Handler
