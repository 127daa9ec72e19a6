"""Where the stack's processes compute: what test_placement checks on a started stack, and test_failures on an
engine reloaded after a failure (a reload of its own would cost an engine start)."""

from __future__ import annotations

import os

import psutil

from localstack.placement import ENGINE_CORE_NAME, ENGINE_CORE_NICE, ENGINE_WORKER_NAME, VLLM_PROCESS_PREFIX
from localstack.processes import wait_until
from localstack.stack import PLACEMENT_CHECK_S, LocalStack


def _thread_cores(process: psutil.Process) -> set[int]:
    cores: set[int] = set()
    for thread in process.threads():
        try:
            cores |= os.sched_getaffinity(thread.id)
        except ProcessLookupError:
            continue
    return cores


def placement(stack: LocalStack) -> tuple[set[int], set[int]]:
    """(cores of the engine's workers, cores of every thread of every process of the stack not vLLM's)."""
    assert stack.triton is not None and stack.gateway is not None
    family = [psutil.Process(stack.triton.pid), *stack.triton.descendants(), psutil.Process(stack.gateway.pid)]
    workers = [p for p in family if p.name().startswith(ENGINE_WORKER_NAME)]
    assert workers, "no engine worker under Triton"
    compute = set().union(*(set(w.cpu_affinity()) for w in workers))
    serving = set().union(*(_thread_cores(p) for p in family if not p.name().startswith(VLLM_PROCESS_PREFIX)))
    return compute, serving


def engine_core_nice(stack: LocalStack) -> set[int]:
    engine_core = next(p for p in stack.engine_processes() if p.name().startswith(ENGINE_CORE_NAME))
    return {os.getpriority(os.PRIO_PROCESS, t.id) for t in engine_core.threads()}


def assert_reloaded_engine_placed(stack: LocalStack) -> None:
    """A reloaded engine still computes off the serving cores: the new stub inherits Triton's confinement, the
    engine it starts must not, and the stack lowers the new engine core's priority as it did the first one's."""
    assert stack.triton is not None
    compute, _ = placement(stack)
    assert compute and not compute & stack.serving_cores
    stub = next(p for p in stack.triton.descendants() if "triton_python_backend_stub" in " ".join(p.cmdline()))
    assert set(psutil.Process(stub.pid).cpu_affinity()) == (stack.serving_cores or os.sched_getaffinity(0))
    if stack.serving_cores:
        assert wait_until(lambda: engine_core_nice(stack) == {ENGINE_CORE_NICE}, 10 * PLACEMENT_CHECK_S)
