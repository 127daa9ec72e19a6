"""Keeps the serving processes off the cores vLLM's CPU engine computes on.

vLLM's CPU worker binds its compute threads to all allowed cores but the last, which it leaves to the other
processes. The kernel still places Triton, its Python stubs and the gateway on the compute cores whenever the
spare core is busy, and every time it does, the forward pass waits for them. Pinning them to the spare cores
once the engine is up gave about 5% more output tokens per second at 64 streams on two cores (bench/README.md,
CPU placement). vLLM's own processes stay where vLLM put them: its engine-core process busy-polls the worker,
and confined to the spare core with the serving processes it held their first tokens back (about 10 ms at
one stream, seconds in one load). It does share that core with them, though, so it runs at a lower priority:
a serving thread that wakes up then gets the core at once instead of waiting for the poller's time slice
(the gateway's added time to first token at one stream: 1.6 to 2.1 ms against 2.0 to 7.2, no throughput lost).
An engine loaded or restarted later starts with every core and its stub's priority, so the stack places again
whenever `engine_layout` changes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import psutil

VLLM_PROCESS_PREFIX = "VLLM::"
ENGINE_WORKER_NAME = "VLLM::Worker"
ENGINE_CORE_NAME = "VLLM::EngineCore"
ENGINE_CORE_NICE = 10


def serving_cores(allowed: set[int], compute: set[int]) -> set[int]:
    """The cores left to everything but the engine's workers; empty when nothing should move."""
    if not compute:
        return set()
    return allowed - compute


def _family(roots: Iterable[psutil.Process]) -> list[psutil.Process]:
    found: list[psutil.Process] = []
    for root in roots:
        try:
            found += [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    return found


def _name(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.NoSuchProcess:
        return ""


def _threads(process: psutil.Process) -> list[int]:
    """Thread ids: the kernel keeps an affinity and a nice value per thread; new threads inherit their creator's."""
    try:
        return [thread.id for thread in process.threads()]
    except psutil.NoSuchProcess:
        return []


def _pin(process: psutil.Process, cores: set[int]) -> None:
    for thread in _threads(process):
        try:
            os.sched_setaffinity(thread, cores)
        except (ProcessLookupError, PermissionError):  # the thread ended meanwhile, or is not ours
            continue


def _lower_priority(process: psutil.Process, nice: int) -> None:
    for thread in _threads(process):
        try:
            os.setpriority(os.PRIO_PROCESS, thread, nice)
        except (ProcessLookupError, PermissionError):
            continue


def engine_layout(roots: Iterable[psutil.Process]) -> frozenset[tuple[int, tuple[int, ...]]]:
    """vLLM's processes under `roots`, each with the cores it may run on: changes when an engine starts, ends
    or binds its workers to their cores."""
    layout = set()
    for process in _family(roots):
        if _name(process).startswith(VLLM_PROCESS_PREFIX):
            try:
                layout.add((process.pid, tuple(sorted(process.cpu_affinity()))))
            except psutil.NoSuchProcess:
                continue
    return frozenset(layout)


def keep_off_compute_cores(roots: Iterable[psutil.Process]) -> set[int]:
    """Pins `roots` and their descendants, except vLLM's processes, to the cores vLLM's CPU workers leave free,
    and lowers the priority of vLLM's engine-core processes, which poll on those cores.

    Returns the cores used; an empty set when there is no CPU worker or it leaves no core free (then
    nothing changes).
    """
    family = _family(roots)
    workers = [p for p in family if _name(p).startswith(ENGINE_WORKER_NAME)]
    compute: set[int] = set()
    for worker in workers:
        try:
            compute |= set(worker.cpu_affinity())
        except psutil.NoSuchProcess:
            continue
    cores = serving_cores(os.sched_getaffinity(0), compute)
    if not cores:
        return set()
    for process in family:
        name = _name(process)
        if not name.startswith(VLLM_PROCESS_PREFIX):
            _pin(process, cores)
        elif name.startswith(ENGINE_CORE_NAME):
            _lower_priority(process, ENGINE_CORE_NICE)
    return cores


def replica_engine_core(index: int) -> int:
    """The core replica `index`'s engine computes on: the allowed cores in turn. Left to itself, vLLM binds every
    engine to all cores but the last, so the replicas' engines shared one core and took turns busy-waiting."""
    cores = sorted(os.sched_getaffinity(0))
    return cores[index % len(cores)]
