"""`make up` stops synchronously: when make returns after a SIGTERM to its process group, nothing the stack
started is still running and every port it used is free, so an immediate second `make up` can start.

It runs the Makefile's own `up` recipe (`-o install`: the installer's work is done in this environment) on the
fast model, with its own run folder and ports.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from localstack.net import free_port
from localstack.paths import FAST_MODEL_NAME, REPO_ROOT
from localstack.processes import wait_until
from localstack.processes import stray_processes

READY_LINE = "[up] ready in"


def _port_is_free(port: int) -> bool:
    """Nothing listens on the port and a server could bind it (as Triton and uvicorn do, with SO_REUSEADDR)."""
    if any(c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in psutil.net_connections()):
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _snapshot(make_pid: int, run_dir: Path, output: Path) -> str:
    """What was still running, and what make and the stack printed, for a stop that hangs."""
    lines = output.read_text(errors="replace").splitlines()[-15:]
    try:
        tree = [psutil.Process(make_pid), *psutil.Process(make_pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    lines += [f"{p.pid} {p.status()}: {' '.join(p.cmdline())[:120]}" for p in tree if p.is_running()]
    lines += stray_processes(run_dir)
    for name in ("gateway.log", "triton.log"):
        log = run_dir / name
        if log.exists():
            lines += [f"--- {name}", *log.read_text(errors="replace").splitlines()[-15:]]
    return "\n".join(lines)


@pytest.mark.timeout(900)
def test_make_up_returns_after_sigterm_only_once_everything_has_exited(tmp_path: Path) -> None:
    run_dir = tmp_path / "up"
    ports = {name: free_port() for name in ("TRITON_HTTP_PORT", "TRITON_GRPC_PORT", "TRITON_METRICS_PORT")}
    gateway_port = free_port()
    env = {
        **os.environ,
        **{name: str(port) for name, port in ports.items()},
        "UP_RUN_DIR": str(run_dir),
        "MODEL": "",
        "MODEL_REPOSITORY": "",
    }
    argv = ["make", "--no-print-directory", "-o", "install", "up", f"MODEL={FAST_MODEL_NAME}", f"PORT={gateway_port}"]
    output = tmp_path / "make.out"
    with open(output, "wb") as out:
        make = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ready = wait_until(lambda: READY_LINE in output.read_text(), 600, 1.0)
        assert ready and make.poll() is None, output.read_text()[-3000:]
        assert stray_processes(run_dir), "the stack's processes should carry the run's marker"

        signalled = time.monotonic()
        os.killpg(make.pid, signal.SIGTERM)  # as a CI job's time limit or `kill -TERM -<pgid>` stops it
        try:
            make.wait(timeout=180)
        except subprocess.TimeoutExpired:
            pytest.fail(f"make still running 180 s after SIGTERM:\n{_snapshot(make.pid, run_dir, output)}")
        stop_s = time.monotonic() - signalled
        print(f"\nmake returned {stop_s:.1f} s after SIGTERM to its process group")

        left = stray_processes(run_dir)
        assert not left, f"still running when make returned ({stop_s:.1f} s after SIGTERM): {left}"
        assert "[up] stopped." in output.read_text()
        busy = [port for port in (*ports.values(), gateway_port) if not _port_is_free(port)]
        assert not busy, f"ports still taken when make returned: {busy}"
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
        for line in stray_processes(run_dir):  # never leave a stack behind, even when the test failed
            psutil.Process(int(line.split(":", 1)[0])).kill()
