"""The local stack keeps Triton, its stub and the gateway off the cores vLLM's CPU worker computes on, and leaves
vLLM's own processes where vLLM put them (the engine core at a lower priority). That a reloaded engine still
computes on its own core is checked after test_failures' first reload (tests/placement_checks.py)."""

from __future__ import annotations

import os

from localstack.placement import ENGINE_CORE_NICE
from localstack.stack import LocalStack
from tests.placement_checks import engine_core_nice, placement


def test_serving_processes_keep_off_the_engine_cores(stack: LocalStack) -> None:
    compute, serving = placement(stack)
    if len(os.sched_getaffinity(0)) < 2:  # one core: nothing to keep apart, nothing moved
        assert stack.serving_cores == set() and serving == compute == os.sched_getaffinity(0)
        return
    assert serving == stack.serving_cores
    assert serving and not serving & compute
    assert serving | compute == os.sched_getaffinity(0)
    engine_cores = [set(p.cpu_affinity()) for p in stack.engine_processes()]
    assert engine_cores and all(cores == os.sched_getaffinity(0) for cores in engine_cores)  # left to vLLM
    assert engine_core_nice(stack) == {ENGINE_CORE_NICE}
