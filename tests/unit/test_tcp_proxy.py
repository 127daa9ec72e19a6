"""The fault-injecting proxy of the e2e tests (tests/tcp_proxy.py), in front of a local echo server."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from tests.tcp_proxy import FaultProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    proxy = FaultProxy("127.0.0.1", server.server_address[1]).start()
    try:
        yield proxy
    finally:
        proxy.stop()
        server.shutdown()
        server.server_close()


def _connect(proxy: FaultProxy) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    return sock


def _echo(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    received = b""
    while len(received) < len(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    return received


def test_forwards_both_ways(proxy: FaultProxy) -> None:
    with _connect(proxy) as sock:
        assert _echo(sock, b"hello") == b"hello"


def test_latency_is_added_per_direction(proxy: FaultProxy) -> None:
    proxy.delay(up_s=0.2, down_s=0.3)
    with _connect(proxy) as sock:
        started = time.monotonic()
        assert _echo(sock, b"x") == b"x"
        assert time.monotonic() - started >= 0.45


def test_a_reset_is_a_rst_not_a_fin(proxy: FaultProxy) -> None:
    with _connect(proxy) as sock:
        assert _echo(sock, b"a") == b"a"
        assert proxy.reset() == 1
        with pytest.raises(ConnectionResetError):
            for _ in range(50):  # the RST may take a moment to land
                if not sock.recv(1):
                    pytest.fail("closed with a FIN")


def test_a_reset_after_bytes_lets_those_through_first(proxy: FaultProxy) -> None:
    proxy.reset(after_bytes=10)
    with _connect(proxy) as sock:
        sock.sendall(b"0123456789abcdef")
        received = b""
        with pytest.raises(ConnectionResetError):
            while chunk := sock.recv(65536):
                received += chunk
        assert received == b"0123456789"  # read before the RST lands, which would discard them


def test_a_pause_after_bytes_holds_the_rest_until_forward(proxy: FaultProxy) -> None:
    proxy.pause(after_bytes=4)
    with _connect(proxy) as sock:
        sock.sendall(b"abcdefgh")
        assert sock.recv(65536) == b"abcd"
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(65536)
        proxy.forward()
        sock.settimeout(5)
        assert sock.recv(65536) == b"efgh"


def test_a_black_hole_swallows_and_ends_in_a_reset(proxy: FaultProxy) -> None:
    with _connect(proxy) as sock:
        proxy.black_hole()
        sock.sendall(b"lost")
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(65536)
        proxy.forward()  # the connection lost bytes: it ends
        sock.settimeout(5)
        with pytest.raises(ConnectionResetError):
            sock.recv(65536)
    with _connect(proxy) as sock:  # new connections flow again
        assert _echo(sock, b"back") == b"back"


def test_refusal_closes_the_port_until_forward(proxy: FaultProxy) -> None:
    proxy.refuse()
    with pytest.raises(ConnectionRefusedError):
        _connect(proxy)
    proxy.forward()
    with _connect(proxy) as sock:
        assert _echo(sock, b"again") == b"again"
