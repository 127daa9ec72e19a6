"""`make up REPLICAS=n`: the replicas' ports, memory shares and the gateway's view of them (nothing started)."""

from __future__ import annotations

import json
from pathlib import Path

from localstack.stack import LocalStack, StackConfig


def test_replicas_get_their_own_ports_folders_and_memory_share(tmp_path: Path) -> None:
    stack = LocalStack(StackConfig(run_dir=tmp_path, replicas=3, engine_memory_share=0.3))
    assert len(stack.replicas) == 2
    second = stack.replicas[0].config
    assert (second.http_port, second.grpc_port, second.metrics_port) == (8100, 8101, 8102)
    assert second.run_dir == tmp_path / "replica-1" and not second.keep_off_engine_cores
    assert abs(stack.config.engine_memory_share - 0.1) < 1e-9 and abs(second.engine_memory_share - 0.1) < 1e-9


def test_the_gateway_spreads_over_every_replica(tmp_path: Path) -> None:
    env = LocalStack(StackConfig(run_dir=tmp_path, replicas=2))._upstream_env()
    assert env["GATEWAY_TRITON_GRPC_URLS"] == "127.0.0.1:8001,127.0.0.1:8101"
    assert json.loads(env["GATEWAY_TRITON_METRICS_URLS"]) == [
        "http://127.0.0.1:8002/metrics", "http://127.0.0.1:8102/metrics"]  # fmt: skip
    assert env["GATEWAY_REQUIRED_MODELS"] == "smollm2-135m-instruct"
    single = LocalStack(StackConfig(run_dir=tmp_path))._upstream_env()
    assert single["GATEWAY_TRITON_GRPC_URL"] == "127.0.0.1:8001" and "GATEWAY_TRITON_GRPC_URLS" not in single
