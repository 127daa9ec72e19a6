"""Keeps the serving processes off the cores vLLM's CPU engine computes on.

vLLM's CPU worker binds its compute threads to all allowed cores but the last, which it leaves to the other
processes. The kernel still places Triton, its Python stubs, the engine's scheduler process and the gateway
on the compute cores whenever the spare core is busy, and every time it does, the forward pass waits for
them. Pinning them to the spare cores once the engine is up gave about 5% more output tokens per second at
64 streams on two cores (README, Performance).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import psutil

ENGINE_WORKER_NAME = "VLLM::Worker"


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


def _is_engine_worker(process: psutil.Process) -> bool:
    try:
        return process.name().startswith(ENGINE_WORKER_NAME)
    except psutil.NoSuchProcess:
        return False


def _pin(process: psutil.Process, cores: set[int]) -> None:
    """Every thread: the kernel keeps an affinity per thread, and new threads inherit their creator's."""
    try:
        threads = process.threads()
    except psutil.NoSuchProcess:
        return
    for thread in threads:
        try:
            os.sched_setaffinity(thread.id, cores)
        except (ProcessLookupError, PermissionError):  # the thread ended meanwhile, or is not ours
            continue


def keep_off_compute_cores(roots: Iterable[psutil.Process]) -> set[int]:
    """Pins `roots` and their descendants, except vLLM's CPU workers, to the cores those workers leave free.

    Returns the cores used; an empty set when there is no CPU worker or it leaves no core free (then
    nothing moves).
    """
    family = _family(roots)
    workers = [p for p in family if _is_engine_worker(p)]
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
        if process not in workers:
            _pin(process, cores)
    return cores
