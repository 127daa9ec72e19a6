"""A real PostgreSQL server (Debian's `postgresql` package) on a free port, in a temporary cluster of its own, for
the responses store's tests. It runs as an unprivileged user (PostgreSQL refuses root) and is stopped, and its
folder removed, by whoever started it."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from localstack.net import free_port
from localstack.processes import Service, wait_until


def postgres_bin() -> Path | None:
    """The newest installed server's bin folder (Debian keeps them off PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _as_user(argv: list[str]) -> list[str]:
    """The command run as `postgres` when we are root; as ourselves otherwise."""
    if os.geteuid() != 0:
        return argv
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", *argv]


@contextmanager
def postgres_server() -> Iterator[str]:
    """Starts a throw-away cluster and yields its URL (`postgresql://postgres@127.0.0.1:<port>/postgres`)."""
    bindir = postgres_bin()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed (scripts/install.sh installs Debian's package)")
    folder = Path(tempfile.mkdtemp(prefix="gateway-pg-"))
    data = folder / "data"
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "LC_ALL": "C"}
    server = None
    try:
        subprocess.run(
            _as_user([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync"]),
            env=env, check=True, capture_output=True, timeout=120,
        )
        port = free_port()
        argv = [str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-c", "listen_addresses=127.0.0.1"]
        argv += ["-c", f"unix_socket_directories={folder}", "-c", "fsync=off"]
        server = Service("postgres", _as_user(argv), env, folder / "postgres.log")
        if not wait_until(lambda: _accepts(port), 30, 0.1, server):
            raise RuntimeError(f"postgres did not start:\n{server.log_tail()}")
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        if server is not None:
            # SIGINT is PostgreSQL's fast shutdown (SIGTERM's smart one waits for every client to leave)
            server.process.send_signal(signal.SIGINT)
            try:
                server.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
            server.stop(grace_s=5)
        shutil.rmtree(folder, ignore_errors=True)
