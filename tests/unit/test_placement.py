"""localstack.placement on real processes: stand-ins for vLLM's worker and engine core stay, the rest move,
and the engine core yields the spare cores."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from localstack.placement import (
    ENGINE_CORE_NICE,
    ENGINE_WORKER_NAME,
    engine_layout,
    keep_off_compute_cores,
    serving_cores,
)

# A parent (a stand-in for Triton) with two children named like vLLM's processes: a CPU worker bound to the
# first allowed CPU and an engine core left free.
PARENT = f"""
import os, subprocess, sys, threading, time
child = '''
import os, sys, time, setproctitle
setproctitle.setproctitle(sys.argv[1])  # as vLLM names its processes
if sys.argv[1] == "{ENGINE_WORKER_NAME}":
    os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})
print("ready", flush=True)
time.sleep(60)
'''
started = []
for name in ("{ENGINE_WORKER_NAME}", "VLLM::EngineCore"):
    started.append(subprocess.Popen([sys.executable, "-c", child, name], stdout=subprocess.PIPE, text=True))
    started[-1].stdout.readline()
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # a second thread to move
print(*(p.pid for p in started), flush=True)
time.sleep(60)
"""


def _nice_values(process: psutil.Process) -> set[int]:
    return {os.getpriority(os.PRIO_PROCESS, thread.id) for thread in process.threads()}


def test_serving_cores_are_what_the_workers_leave() -> None:
    assert serving_cores({0, 1, 2, 3}, {0, 1, 2}) == {3}
    assert serving_cores({0, 1}, set()) == set()  # no CPU worker: nothing moves
    assert serving_cores({0}, {0}) == set()  # one core: nowhere to go


def test_everything_but_the_worker_leaves_its_core() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        worker, engine_core = (psutil.Process(int(pid)) for pid in parent.stdout.readline().split())
        deadline = time.monotonic() + 10
        while psutil.Process(parent.pid).num_threads() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        allowed = os.sched_getaffinity(0)
        first = min(allowed)
        assert engine_layout([psutil.Process(parent.pid)]) == {
            (worker.pid, (first,)),
            (engine_core.pid, tuple(sorted(allowed))),
        }
        cores = keep_off_compute_cores([psutil.Process(parent.pid)])
        assert cores == allowed - {first}  # empty with one core: then nothing moves
        for thread in psutil.Process(parent.pid).threads():
            assert os.sched_getaffinity(thread.id) == (cores or allowed)
        assert worker.cpu_affinity() == [first]
        assert set(engine_core.cpu_affinity()) == os.sched_getaffinity(0)
        own = os.getpriority(os.PRIO_PROCESS, 0)  # what the stand-ins inherited
        assert _nice_values(engine_core) == {ENGINE_CORE_NICE if cores else own}
        assert _nice_values(worker) == _nice_values(psutil.Process(parent.pid)) == {own}
    finally:
        for process in psutil.Process(parent.pid).children(recursive=True) + [psutil.Process(parent.pid)]:
            process.kill()
        parent.wait(timeout=10)


def test_nothing_moves_without_an_engine_worker() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        before = os.sched_getaffinity(sleeper.pid)
        assert keep_off_compute_cores([psutil.Process(sleeper.pid)]) == set()
        assert os.sched_getaffinity(sleeper.pid) == before
    finally:
        sleeper.kill()
        sleeper.wait(timeout=10)
