"""`make up REPLICAS=n`: the replicas' ports, memory shares and the gateway's view of them (nothing started)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from localstack.stack import LocalStack
from localstack.stack_config import StackConfig


def test_replicas_get_their_own_ports_folders_and_memory_share(tmp_path: Path) -> None:
    stack = LocalStack(StackConfig(run_dir=tmp_path, replicas=3, engine_memory_share=0.3))
    assert len(stack.replicas) == 2
    second = stack.replicas[0].config
    assert (second.http_port, second.grpc_port, second.metrics_port) == (8100, 8101, 8102)
    assert second.run_dir == tmp_path / "replica-1" and not second.keep_off_engine_cores
    assert abs(stack.config.engine_memory_share - 0.1) < 1e-9 and abs(second.engine_memory_share - 0.1) < 1e-9


def test_a_small_share_is_not_split_below_what_an_engine_needs(tmp_path: Path) -> None:
    """The fast model's 0.05 already is about the least an engine starts with (its worker alone is 0.7 GiB):
    halved, vLLM found no room for a KV cache and `make up REPLICAS=2 MODEL=tiny-random-llama` failed."""
    stack = LocalStack(StackConfig(run_dir=tmp_path, replicas=2, engine_memory_share=0.05))
    assert stack.config.engine_memory_share == 0.05 and stack.replicas[0].config.engine_memory_share == 0.05


def test_each_replica_engine_computes_on_a_core_of_its_own(tmp_path: Path) -> None:
    cores = sorted(os.sched_getaffinity(0))
    stack = LocalStack(StackConfig(run_dir=tmp_path, replicas=2))
    bound = [s._triton_env()["VLLM_CPU_OMP_THREADS_BIND"] for s in (stack, stack.replicas[0])]
    assert bound == [str(cores[0]), str(cores[1 % len(cores)])]
    assert "VLLM_CPU_OMP_THREADS_BIND" not in LocalStack(StackConfig(run_dir=tmp_path))._triton_env()


def test_the_gateway_spreads_over_every_replica(tmp_path: Path) -> None:
    env = LocalStack(StackConfig(run_dir=tmp_path, replicas=2))._upstream_env()
    assert env["GATEWAY_TRITON_GRPC_URLS"] == "127.0.0.1:8001,127.0.0.1:8101"
    assert json.loads(env["GATEWAY_TRITON_METRICS_URLS"]) == [
        "http://127.0.0.1:8002/metrics", "http://127.0.0.1:8102/metrics"]  # fmt: skip
    assert env["GATEWAY_REQUIRED_MODELS"] == "smollm2-135m-instruct"
    single = LocalStack(StackConfig(run_dir=tmp_path))._upstream_env()
    assert single["GATEWAY_TRITON_GRPC_URL"] == "127.0.0.1:8001" and "GATEWAY_TRITON_GRPC_URLS" not in single


def test_the_engine_uses_the_compile_cache_that_loads_on_the_cpu(tmp_path: Path) -> None:
    """vLLM's AOT cache fails to load on the CPU, and the engine then compiles at every start."""
    assert LocalStack(StackConfig(run_dir=tmp_path))._triton_env()["VLLM_USE_AOT_COMPILE"] == "0"
