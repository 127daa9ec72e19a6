"""Starting and stopping child processes so that nothing they spawn outlives them.

Each service runs in its own session (process group). Stopping sends SIGTERM,
waits, then kills the whole group and any descendant that escaped it: Triton's
Python stubs and vLLM's engine processes included.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil


# How much lower than everything else the scheduler ranks a session that runs a CPU engine (Triton with vLLM,
# or `vllm serve`): see `lower_session_priority`.
ENGINE_SESSION_NICE = 10
# Overrides it (0: leave the rank alone); the test session sets 0, see tests/conftest.py.
ENGINE_SESSION_NICE_VAR = "LOCALSTACK_ENGINE_SESSION_NICE"


def engine_session_nice() -> int:
    return int(os.environ.get(ENGINE_SESSION_NICE_VAR, ENGINE_SESSION_NICE))


def lower_session_priority(pid: int, nice: int) -> bool:
    """Ranks the session of `pid` below the others; returns whether the kernel took it.

    Linux schedules each session as one group (autogroup) before it looks at a process's own nice value. vLLM's
    CPU engine busy-polls its worker through shared memory, so its session is always runnable; on this kernel
    that left a process of another session (the gateway, a client) unscheduled for one to three seconds at a
    time while a stream ran, with the bytes waiting in its socket (measured with `vllm serve` as much as with
    Triton). The session's nice value is the one knob that reaches the group; raising it needs no privilege.
    Callers rank a session once its engine has loaded: Triton 2.51 waits forever for a stub that misses one
    health check (a second) during a load, and a lower rank makes that likelier on a busy machine.
    """
    if nice == 0:
        return False
    try:
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))
        return True
    except OSError:  # no autogroup in this kernel, or the process is gone
        return False


class Service:
    """One child process with its log file, in a session of its own."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: Path, cwd: Path | None = None):
        self.name = name
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab", buffering=0)
        self.process = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def returncode(self) -> int | None:
        """The exit status once it has exited (negative: the signal that ended it)."""
        return self.process.poll()

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        """A crash: SIGKILL the process alone, then clear what it leaves behind."""
        family = self.descendants()
        if self.running():
            self.process.kill()
        self.process.wait()
        _kill_group(self.pid)
        _kill_all(family)
        self._log.close()

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM, wait up to `grace_s`, then SIGKILL the group and every straggler."""
        family = self.descendants()
        if self.running():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        family += [p for p in self.descendants() if p not in family]
        _kill_group(self.pid)
        _kill_all(family)
        if self.running():
            self.process.kill()
        self.process.wait()
        if not self._log.closed:
            self._log.close()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    """A process stopped from outside (a CI time limit, `timeout`, `kill`) unwinds as on Ctrl-C, so the
    services it started are stopped on the way out."""
    signal.signal(signal.SIGTERM, _interrupt)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_all(processes: list[psutil.Process], wait_s: float = 10.0) -> None:
    alive = []
    for process in processes:
        try:
            process.kill()
            alive.append(process)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=wait_s)


class SignalFlag:
    """A flag that a signal handler may set. `threading.Event.set` takes the lock that `Event.wait` holds in
    the very thread the handler interrupts, so a signal arriving there deadlocks (`make up` hung on SIGTERM)."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout_s: float) -> bool:
        """Sleeps in short steps until set or `timeout_s` passed; returns whether it is set."""
        deadline = time.monotonic() + timeout_s
        while not self._set and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(0.1, left))
        return self._set


def wait_until(
    check,
    timeout_s: float,
    interval_s: float = 0.5,
    while_alive: Service | None = None,
    unless: "SignalFlag | None" = None,
) -> bool:
    """Polls `check` until it is true; gives up early when `while_alive` has exited or `unless` is set."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        if while_alive is not None and not while_alive.running():
            return False
        if unless is None:
            time.sleep(interval_s)
        elif unless.wait(interval_s):
            return False
    return False


# Inherited by every process a stack starts (Triton, stubs, engines, gateways), so that strays can be found.
RUN_MARKER = "LOCALSTACK_RUN_DIR"


def _carries_marker(pid: int, marker: bytes) -> bool:
    """Reads the environment block whole: vLLM renames its processes (setproctitle), which blanks the block's
    first entries, and psutil's `environ()` stops at the first blank one, so it sees no variable at all."""
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # gone meanwhile, or not ours to read
        return False


def stray_processes(run_dir: Path) -> list[str]:
    """Processes started by the stack in `run_dir` that are still alive (Triton, stubs, vLLM engines)."""
    marker = f"{RUN_MARKER}={run_dir}".encode()
    found = []
    for process in psutil.process_iter(["pid", "name"]):
        try:
            if _carries_marker(process.pid, marker):
                found.append(f"{process.pid}: {' '.join(process.cmdline())[:120]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found
