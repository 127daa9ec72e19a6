"""CPU time and resident memory of a server process while a load runs, read with psutil, so a server's
cost is measured from outside it and counts only its own process."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import psutil


def cpu_seconds(pid: int, with_children: bool = False) -> float:
    """user + system time of `pid` (and, if asked, of its live descendants)."""
    processes = [psutil.Process(pid)]
    if with_children:
        processes += processes[0].children(recursive=True)
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


ENGINE_PREFIX = "VLLM::"  # how vLLM names its engine-core and worker processes


def cpu_by_role(roots: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each root process and its descendants, by role; vLLM's engine processes
    are counted apart, under "engine", so a serving path's own cost per token shows."""
    totals = dict.fromkeys([*roots, "engine"], 0.0)
    for role, pid in roots.items():
        try:
            root = psutil.Process(pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for process in tree:
            try:
                name, times = process.name(), process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            totals["engine" if name.startswith(ENGINE_PREFIX) else role] += times.user + times.system
    return totals


STUB_NAME = "triton_python_backend_stub"  # Triton's Python-backend process, one per model instance


def process_kind(name: str, role: str) -> str:
    """Which stage of a serving path a process is: vLLM's engine, Triton's Python stub, or its root's role
    (the root itself and its other descendants, such as the gateway's uvicorn workers)."""
    if name.startswith(ENGINE_PREFIX):
        return "engine"
    if STUB_NAME.startswith(name) and len(name) >= 15:  # Linux may cut the name to its first 15 characters
        return "stub"
    return role


def cpu_by_process(roots: dict[str, int]) -> dict[int, tuple[str, float]]:
    """pid -> (kind, CPU seconds so far) for every process under the roots, so a load's CPU can be split by
    stage and the busiest process of each stage found (a stage of several processes, like the gateway's
    workers, saturates when its busiest process does)."""
    found: dict[int, tuple[str, float]] = {}
    for role, pid in roots.items():
        try:
            root = psutil.Process(pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for process in tree:
            try:
                name, times = process.name(), process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            found[process.pid] = (process_kind(name, role), times.user + times.system)
    return found


@dataclass
class Usage:
    cpu_s: float
    rss_start_mb: float
    rss_peak_mb: float


class Watch:
    """Context manager: CPU seconds spent by `pid` inside the block, and its peak RSS sampled meanwhile."""

    def __init__(self, pid: int, interval_s: float = 0.05, with_children: bool = False) -> None:
        self.process = psutil.Process(pid)
        self.pid = pid
        self.interval_s = interval_s
        self.with_children = with_children
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self.usage = Usage(0.0, 0.0, 0.0)

    def _rss_mb(self) -> float:
        return self.process.memory_info().rss / 2**20

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.usage.rss_peak_mb = max(self.usage.rss_peak_mb, self._rss_mb())
            except psutil.NoSuchProcess:
                return

    def __enter__(self) -> "Watch":
        self.usage.rss_start_mb = self.usage.rss_peak_mb = self._rss_mb()
        self._cpu0 = cpu_seconds(self.pid, self.with_children)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.usage.cpu_s = cpu_seconds(self.pid, self.with_children) - self._cpu0
        self._stop.set()
        self._thread.join()
