"""A TCP relay that can go silent: how an isolated node reaches the rendezvous store.

etcd listens on the host's 127.0.0.1 only. A node in its own network
namespace cannot see that address, so the platform gives each node a relay:
a listener on 127.0.0.1 inside the node's namespace, forwarding to etcd on
the host. A partition must cut the node off from etcd too, as a real NIC
failure would, and without a reset: ``stall()`` stops accepting and stops
moving bytes (they wait in kernel buffers, unacknowledged by the far side),
``resume()`` carries on. A relay whose upstream refuses (etcd is down)
closes the node's connection, as a refused connection would.
"""
from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

_POLL_S = 0.2


class StallableRelay:
    def __init__(self, listener: socket.socket, upstream: Callable[[], tuple[str, int]], name: str) -> None:
        self.listener = listener
        self.listener.settimeout(_POLL_S)
        self.upstream = upstream
        self.name = name
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept_loop, name=f"relay-{name}", daemon=True)

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def start(self) -> StallableRelay:
        self._thread.start()
        return self

    def stall(self) -> None:
        """Stop accepting and forwarding; connections stay open and silent."""
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    @property
    def stalled(self) -> bool:
        return not self._flowing.is_set()

    def close(self) -> None:
        """Close the listener and every relayed connection. Idempotent."""
        self._closed.set()
        self._flowing.set()
        self._thread.join(5)
        with self._lock:
            conns, self._conns = self._conns, set()
        for s in conns:
            _close(s)
        _close(self.listener)

    def _wait_flowing(self) -> bool:
        while not self._flowing.wait(_POLL_S):
            if self._closed.is_set():
                return False
        return not self._closed.is_set()

    def _accept_loop(self) -> None:
        while self._wait_flowing():
            try:
                down, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._connect, args=(down,), name=f"relay-{self.name}-conn",
                             daemon=True).start()

    def _connect(self, down: socket.socket) -> None:
        try:
            up = socket.create_connection(self.upstream(), timeout=5)
        except OSError:
            _close(down)  # upstream refused: the node sees its connection dropped
            return
        with self._lock:
            if self._closed.is_set():
                _close(down)
                _close(up)
                return
            self._conns |= {down, up}
        for a, b in ((down, up), (up, down)):
            threading.Thread(target=self._pump, args=(a, b), name=f"relay-{self.name}-pump",
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(_POLL_S)
        try:
            while self._wait_flowing():
                try:
                    data = src.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                if not self._wait_flowing():
                    break
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        with self._lock:
            self._conns.discard(src)
        _close(src)


def _close(s: socket.socket) -> None:
    try:
        s.close()
    except OSError:
        pass
