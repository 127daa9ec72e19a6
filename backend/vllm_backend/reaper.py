"""Stops vLLM's engine processes when the stub that started them dies.

vLLM's engine-core process does not notice its client dying, so a crashed or
killed stub would leave it running, holding memory and ports. The stub starts
this script as a small child process and keeps a pipe to it open; when the stub
dies the pipe closes, and the script kills the engine processes it was told of.

Run as a script: `python reaper.py`, then lines of `pid:create_time` pairs on stdin.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import IO

import psutil


def describe(processes: list[psutil.Process]) -> str:
    """One line naming processes by pid and start time (so a reused pid is never killed)."""
    return " ".join(f"{p.pid}:{p.create_time()!r}" for p in processes) + "\n"


def parse(line: str) -> list[tuple[int, float]]:
    pairs = []
    for item in line.split():
        pid, _, created = item.partition(":")
        pairs.append((int(pid), float(created)))
    return pairs


def kill(pairs: list[tuple[int, float]]) -> None:
    for pid, created in pairs:
        try:
            process = psutil.Process(pid)
            if process.create_time() == created:
                process.kill()
        except psutil.Error:
            continue


def watch(stream: IO[str]) -> None:
    """Keeps the latest list of processes; kills them when the stream ends."""
    latest: list[tuple[int, float]] = []
    for line in stream:
        latest = parse(line)
    kill(latest)


class Reaper:
    """The stub's side: start the watcher and tell it which processes to stop."""

    def __init__(self) -> None:
        # Inside Triton's stub sys.executable is not a Python interpreter; the venv's is first on PATH.
        python = sys.executable if os.path.basename(sys.executable).startswith("python") else shutil.which("python3")
        self.process = subprocess.Popen(
            [python, os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a signal to the stub's group must not stop the watcher first
        )

    def guard(self, processes: list[psutil.Process]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(describe(processes))
        self.process.stdin.flush()

    def close(self) -> None:
        """A clean stop: the engine is already shut down, so nothing is left to kill."""
        assert self.process.stdin is not None
        self.guard([])
        self.process.stdin.close()
        self.process.wait(timeout=10)


if __name__ == "__main__":
    watch(sys.stdin)
