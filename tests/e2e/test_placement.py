"""The local stack keeps Triton, its stub and the gateway off the cores vLLM's CPU worker computes on, leaves
vLLM's own processes where vLLM put them (the engine core at a lower priority), and a reloaded engine still
computes on its own core."""

from __future__ import annotations

import os

import httpx
import psutil
import pytest

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


def _placement(stack: LocalStack) -> tuple[set[int], set[int]]:
    """(cores of the engine's workers, cores of every thread of every process of the stack not vLLM's)."""
    assert stack.triton is not None and stack.gateway is not None
    family = [psutil.Process(stack.triton.pid), *stack.triton.descendants(), psutil.Process(stack.gateway.pid)]
    workers = [p for p in family if p.name().startswith(ENGINE_WORKER_NAME)]
    assert workers, "no engine worker under Triton"
    compute = set().union(*(set(w.cpu_affinity()) for w in workers))
    serving = set().union(*(_thread_cores(p) for p in family if not p.name().startswith(VLLM_PROCESS_PREFIX)))
    return compute, serving


def _engine_core_nice(stack: LocalStack) -> set[int]:
    engine_core = next(p for p in stack.engine_processes() if p.name().startswith(ENGINE_CORE_NAME))
    return {os.getpriority(os.PRIO_PROCESS, t.id) for t in engine_core.threads()}


def test_serving_processes_keep_off_the_engine_cores(stack: LocalStack) -> None:
    compute, serving = _placement(stack)
    if len(os.sched_getaffinity(0)) < 2:  # one core: nothing to keep apart, nothing moved
        assert stack.serving_cores == set() and serving == compute == os.sched_getaffinity(0)
        return
    assert serving == stack.serving_cores
    assert serving and not serving & compute
    assert serving | compute == os.sched_getaffinity(0)
    engine_cores = [set(p.cpu_affinity()) for p in stack.engine_processes()]
    assert engine_cores and all(cores == os.sched_getaffinity(0) for cores in engine_cores)  # left to vLLM
    assert _engine_core_nice(stack) == {ENGINE_CORE_NICE}


@pytest.mark.disruptive
def test_a_reloaded_engine_still_computes_off_the_serving_cores(stack: LocalStack, model_name: str) -> None:
    """The new stub inherits Triton's confinement; the engine it starts must not, and the stack lowers the new
    engine core's priority as it did the first one's."""
    api = f"{stack.triton_http_url}/v2/repository/models/{model_name}"
    httpx.post(f"{api}/unload", timeout=120).raise_for_status()
    httpx.post(f"{api}/load", timeout=600).raise_for_status()
    compute, serving = _placement(stack)
    assert compute and not compute & stack.serving_cores
    stub = next(p for p in stack.triton.descendants() if "triton_python_backend_stub" in " ".join(p.cmdline()))
    assert set(psutil.Process(stub.pid).cpu_affinity()) == (stack.serving_cores or os.sched_getaffinity(0))
    if stack.serving_cores:
        assert wait_until(lambda: _engine_core_nice(stack) == {ENGINE_CORE_NICE}, 10 * PLACEMENT_CHECK_S)

