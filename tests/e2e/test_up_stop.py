"""`make up MODEL_REPOSITORY=...` serves every model of a repository, and stops synchronously: when make returns
after a SIGTERM to its process group, nothing the stack started is still running and every port it used is free,
so an immediate second `make up` can start. (Ctrl-C sends SIGINT to the same group, which up.py and make treat as
they treat SIGTERM; test_model_choice.py sends one during a start.)

It runs the Makefile's own `up` recipe (`-o install`: the installer's work is done in this environment) on a
repository serving the fast model under a name of its own, with its own run folder and ports.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import psutil
import pytest

from localstack.model_choice import FAST_MODEL_MEMORY_SHARE
from localstack.model_repo import write_model_repository
from localstack.net import free_port
from localstack.paths import REPO_ROOT, CachePaths, default_cache_dir
from localstack.processes import wait_until
from localstack.processes import stray_processes

READY_LINE = "[up] ready in"
# A Triton model named unlike any prepared model: what is served comes from the repository.
REPOSITORY_MODEL = "tiny-llama-from-a-repository"


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
def test_make_up_serves_a_repository_and_returns_after_sigterm_only_once_everything_has_exited(
    tmp_path: Path,
) -> None:
    repository = write_model_repository(
        tmp_path / "repository", CachePaths(default_cache_dir()).fast_model_dir, REPOSITORY_MODEL,
        FAST_MODEL_MEMORY_SHARE,
    )  # fmt: skip
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
    argv = ["make", "--no-print-directory", "-o", "install", "up", f"MODEL_REPOSITORY={repository}",
            f"PORT={gateway_port}"]  # fmt: skip
    output = tmp_path / "make.out"
    with open(output, "wb") as out:
        make = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ready = wait_until(lambda: READY_LINE in output.read_text(), 600, 1.0)
        assert ready and make.poll() is None, output.read_text()[-3000:]
        assert f"(model: {REPOSITORY_MODEL})" in output.read_text()
        body = {"model": REPOSITORY_MODEL, "prompt": "Once upon a time", "max_tokens": 4}
        response = httpx.post(f"http://127.0.0.1:{gateway_port}/v1/completions", json=body, timeout=60)
        assert response.status_code == 200, response.text
        assert response.json()["usage"]["completion_tokens"] > 0
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
