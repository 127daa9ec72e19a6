"""A real `redis-server` (Debian's package) on a free port, in a folder of its own, for the tests of shared
counters. It keeps nothing on disk and is stopped by whoever started it."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from localstack.net import free_port
from localstack.processes import Service, wait_until


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    """Starts redis-server and yields its URL (`redis://127.0.0.1:<port>/0`)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (scripts/install.sh installs Debian's package)")
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder), "--save", "", "--appendonly", "no"]
    server = Service("redis", argv, {"PATH": "/usr/bin:/bin"}, folder / "redis.log")
    try:
        if not wait_until(lambda: _answers_ping(port), 15, 0.1, server):
            raise RuntimeError(f"redis-server did not start:\n{server.log_tail()}")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.stop(grace_s=5)
