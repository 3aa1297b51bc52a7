"""The control channel between a controller and its storage daemon: a unix socket.

One request per connection: the client sends one JSON object and a newline, the
daemon answers one JSON object and a newline and closes. ``{"cmd": ...}`` is one
of ``set`` (``name``, ``rule``, ``node``: only that node's callers), ``clear`` (``name``, or none for all),
``rules``, ``pauses``, ``wait_pause`` (``after``, ``timeout_s`` up to
:data:`MAX_WAIT_S`), ``release`` (``pause``, or none for all), ``status`` and
``stop``. Answers carry ``"ok": true`` and the result, or ``"ok": false`` and an
``error`` in words. Requests are at most 64 KiB; every socket operation has a
timeout, and each connection is served on its own thread (a ``wait_pause`` does
not hold up a ``release``). The socket lives in a folder only root can enter.
"""
from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from elastic_chaos.storagefs.engine import Engine
from elastic_chaos.storagefs.errors import DaemonError, RuleError
from elastic_chaos.storagefs.rules import from_json, to_json

log = logging.getLogger(__name__)

MAX_REQUEST = 64 * 1024
MAX_WAIT_S = 30.0
IO_TIMEOUT_S = 10.0
MAX_CLIENTS = 32


class ControlServer:
    """The daemon's end. ``close()`` is idempotent."""

    def __init__(self, path: Path, engine: Engine, status: Callable[[], dict[str, Any]],
                 stop: Callable[[], None]) -> None:
        self.path, self.engine, self._status, self._stop = path, engine, status, stop
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        staging = path.with_name(path.name + ".new")  # appears listening, never half-made
        staging.unlink(missing_ok=True)
        self._sock.bind(str(staging))
        staging.chmod(0o600)
        self._sock.listen(16)
        staging.rename(path)
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)
        self._closed = False
        threading.Thread(target=self._accept, name="control", daemon=True).start()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._sock.close()
            self.path.unlink(missing_ok=True)

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            if not self._slots.acquire(timeout=IO_TIMEOUT_S):
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), name="control-client", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn:
                conn.settimeout(IO_TIMEOUT_S)
                answer = self._answer(_read_line(conn))
                conn.sendall(json.dumps(answer).encode() + b"\n")
        except (OSError, ValueError) as exc:
            log.warning("control request failed: %s", exc)
        finally:
            self._slots.release()

    def _answer(self, raw: bytes) -> dict[str, Any]:
        try:
            req = json.loads(raw)
            if not isinstance(req, dict):
                raise RuleError("a request is a JSON object")
            return {"ok": True, **self._do(req)}
        except (RuleError, ValueError, TypeError, KeyError) as exc:
            return {"ok": False, "error": str(exc)}

    def _do(self, req: dict[str, Any]) -> dict[str, Any]:
        cmd, e = req.get("cmd"), self.engine
        if cmd == "set":
            name = req["name"]
            if not isinstance(name, str) or not name:
                raise RuleError("a rule needs a name")
            node = req.get("node")
            if node is not None and (not isinstance(node, str) or not node):
                raise RuleError(f"node {node!r}: the name of a node of the job, or none for every caller")
            e.set(name, from_json(req["rule"]), node)
            return {}
        if cmd == "clear":
            return {"cleared": e.clear(req.get("name"))}
        if cmd == "rules":
            return {"rules": {n: to_json(r) for n, r in e.rules().items()}}
        if cmd == "pauses":
            return {"pauses": [p.to_json() for p in e.pauses()]}
        if cmd == "wait_pause":
            timeout = min(float(req.get("timeout_s", 1.0)), MAX_WAIT_S)
            found = e.wait_pause(int(req.get("after", 0)), max(timeout, 0.0))
            return {"pause": found.to_json() if found else None}
        if cmd == "release":
            pause = req.get("pause")
            return {"released": [p.to_json() for p in e.release(None if pause is None else int(pause))]}
        if cmd == "status":
            return self._status()
        if cmd == "stop":
            threading.Thread(target=self._stop, name="stop", daemon=True).start()
            return {}
        raise RuleError(f"unknown command {cmd!r}")


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST:
            raise ValueError(f"request over {MAX_REQUEST} bytes")
    return data


def call(path: Path, request: dict[str, Any], *, timeout_s: float = IO_TIMEOUT_S) -> dict[str, Any]:
    """Send one request to the daemon at ``path``; its answer. DaemonError when the daemon
    cannot be reached or refuses (the message says which)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(str(path))
            sock.sendall(json.dumps(request).encode() + b"\n")
            raw = _read_line(sock)
    except (OSError, ValueError) as exc:
        raise DaemonError(f"the storage daemon's control socket {path} did not answer "
                            f"{request.get('cmd')!r}: {exc}") from exc
    try:
        answer = json.loads(raw)
    except ValueError as exc:
        raise DaemonError(f"the storage daemon answered {request.get('cmd')!r} with {raw[:200]!r}") from exc
    if not isinstance(answer, dict) or not answer.get("ok"):
        error = answer.get("error") if isinstance(answer, dict) else answer
        raise DaemonError(f"the storage daemon refused {request.get('cmd')!r}: {error}")
    return answer
