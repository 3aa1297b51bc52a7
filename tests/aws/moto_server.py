"""A real moto server on loopback, and a counting proxy in front of it.

No AWS here: moto plays it. Measured facts the tests rely on: moto runs spot
instances and TerminateInstances; its Auto Scaling group replaces a
terminated member at once; its FIS only keeps books (an experiment's state
moves pending -> initiating -> running -> completed as it is read, nothing
happens to instances, targets by tag resolve to nothing, so templates name
ARNs). Where AWS would act, the tests play AWS's part and say so.

The proxy counts every request that reaches the server (method, path and the
API operation from the Action form field, the X-Amz-Target header, an RPC v2
path or, for FIS's REST API, method + path), so a test can prove a dry run
made no mutating call *at the server*, not merely in our own bookkeeping.
"""
from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

READ_PREFIXES = ("Describe", "List", "Get")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoServer:
    """``moto_server`` on 127.0.0.1:<free port>, stopped by its PID."""

    def __init__(self, log_path: Path) -> None:
        self.port = free_port()
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> MotoServer:
        exe = Path(sys.executable).parent / "moto_server"
        if not exe.exists():
            raise RuntimeError(f"{exe} is missing: pip install 'moto[server]' (make install does)")
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto_server exited {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1):
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto_server did not answer within {timeout_s}s")

    def reset(self) -> None:
        req = urllib.request.Request(self.endpoint + "/moto-api/reset", method="POST")
        with urllib.request.urlopen(req, timeout=10):
            pass

    def transition(self, model: str, progression: dict[str, Any] | None) -> None:
        """moto's state manager: how ``model``'s states advance (``{"progression": "manual",
        "times": N}``: one state per N reads); None: back to moto's default."""
        path, body = (("unset-transition", {"model_name": model}) if progression is None
                      else ("set-transition", {"model_name": model, "transition": progression}))
        req = urllib.request.Request(f"{self.endpoint}/moto-api/state-manager/{path}", method="POST",
                                     data=json.dumps(body).encode())
        with urllib.request.urlopen(req, timeout=10):
            pass

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()
        self.proc = None


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    operation: str

    @property
    def mutating(self) -> bool:
        if " " in self.operation:   # a REST call (FIS): METHOD PATH
            return not self.operation.startswith(("GET ", "HEAD "))
        return not self.operation.startswith(READ_PREFIXES)


def operation_of(method: str, path: str, headers: Any, body: bytes) -> str:
    target = headers.get("X-Amz-Target")
    if target:
        return str(target).split(".")[-1]
    match = re.search(r"/operation/([A-Za-z]+)$", path)
    if match:
        return match.group(1)
    if body and "x-www-form-urlencoded" in str(headers.get("Content-Type", "")):
        action = urllib.parse.parse_qs(body.decode()).get("Action")
        if action:
            return action[0]
    return f"{method} {path.split('?')[0]}"


class CountingProxy:
    """Forwards every request to the moto server and remembers it."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> CountingProxy:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def clear(self) -> None:
        with self._lock:
            self.seen.clear()

    def mutating(self) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.mutating]

    def operations(self) -> list[str]:
        with self._lock:
            return [s.operation for s in self.seen]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with outer._lock:
                    outer.seen.append(Seen(self.command, self.path,
                                           operation_of(self.command, self.path, self.headers, body)))
                conn = http.client.HTTPConnection("127.0.0.1", outer.upstream_port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("content-length", "connection", "transfer-encoding", "server", "date"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _forward  # noqa: N815

        return Handler
