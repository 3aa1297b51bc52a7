"""The stallable relay: forwards, goes silent without a reset, resumes."""
from __future__ import annotations

import socket
import threading

import pytest

from elastic_chaos.platforms.local.relay import StallableRelay


@pytest.fixture
def echo_server():
    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    def echo(conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(1024):
                    conn.sendall(data)
            except OSError:
                pass  # the relay under test closed or reset its side

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    yield srv.getsockname()
    stop.set()
    server.join(5)   # the accept loop ends before its socket is closed
    srv.close()


@pytest.fixture
def relay_to(echo_server):
    made = []

    def make(upstream=echo_server):
        relay = StallableRelay(socket.create_server(("127.0.0.1", 0)), lambda: upstream, "test").start()
        made.append(relay)
        return relay

    yield make
    for r in made:
        r.close()


def roundtrip(port: int, payload: bytes, timeout: float = 2.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as c:
        c.sendall(payload)
        return c.recv(1024)


def test_bytes_flow_both_ways(relay_to):
    assert roundtrip(relay_to().port, b"ping") == b"ping"


def test_a_stalled_relay_is_silent_not_reset(relay_to):
    relay = relay_to()
    with socket.create_connection(("127.0.0.1", relay.port), timeout=2) as c:
        c.sendall(b"one")
        assert c.recv(16) == b"one"
        relay.stall()
        c.sendall(b"two")
        c.settimeout(1.0)
        with pytest.raises(TimeoutError):   # silence: no data, no reset, no close
            c.recv(16)
        relay.resume()
        c.settimeout(2.0)
        assert c.recv(16) == b"two"           # what waited in the buffers arrives after healing


def test_a_refused_upstream_drops_the_connection(relay_to):
    dead = socket.create_server(("127.0.0.1", 0))
    addr = dead.getsockname()
    dead.close()
    relay = relay_to(addr)
    with socket.create_connection(("127.0.0.1", relay.port), timeout=2) as c:
        c.settimeout(2.0)
        try:
            assert c.recv(16) == b""             # closed by the relay
        except ConnectionResetError:
            pass                                 # or reset: either way, not silence


def test_close_is_idempotent(relay_to):
    relay = relay_to()
    relay.close()
    relay.close()
