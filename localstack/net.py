"""Free ports and HTTP readiness polls: every server of a run gets its own ports and is used only once
it answers."""

from __future__ import annotations

import random
import socket
import urllib.error
import urllib.request
from pathlib import Path

# Ports are picked below the kernel's ephemeral range, where nothing is handed out unasked; a replica's ports are
# the first replica's plus 100 per replica, so the pick leaves room for a few below the range.
LOWEST_PORT = 10000
ROOM_FOR_REPLICAS = 1000


def _ephemeral_low(default: int = 32768) -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


def bindable(port: int) -> bool:
    """Whether a listening socket can take `port` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port nobody listens on. Not one the kernel picks for `bind(0)`: in that range, a port found free can go to
    any process's outgoing connection or vLLM's own listeners before the server binds it (Triton then failed to
    start with "address already in use" while other stacks ran)."""
    highest = max(LOWEST_PORT + 1, _ephemeral_low() - ROOM_FOR_REPLICAS)
    for _ in range(200):
        port = random.randrange(LOWEST_PORT, highest)
        if bindable(port):
            return port
    raise RuntimeError(f"no free port between {LOWEST_PORT} and {highest}")


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False
