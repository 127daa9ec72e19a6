from __future__ import annotations

import subprocess
import sys
import time

import psutil

from vllm_backend.reaper import Reaper, describe, parse


def test_describe_and_parse_round_trip() -> None:
    me = psutil.Process()
    assert parse(describe([me])) == [(me.pid, me.create_time())]


def test_guarded_processes_die_when_the_pipe_closes() -> None:
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    reaper = Reaper()
    reaper.guard([psutil.Process(victim.pid)])
    reaper.process.stdin.close()  # what the kernel does when the stub dies
    assert victim.wait(timeout=10) != 0
    reaper.process.wait(timeout=10)


def test_a_clean_close_kills_nothing() -> None:
    survivor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    reaper = Reaper()
    reaper.guard([psutil.Process(survivor.pid)])
    reaper.close()
    time.sleep(0.2)
    assert survivor.poll() is None
    survivor.kill()
    survivor.wait()
