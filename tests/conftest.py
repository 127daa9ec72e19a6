"""Shared fixtures. End-to-end tests share one local stack (Triton + vLLM + gateway) per session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localstack.net import free_port
from localstack.processes import stop_on_sigterm
from localstack.stack import LocalStack, StackConfig, stray_processes


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "disruptive: kills parts of the shared stack; runs after every other test")
    stop_on_sigterm()  # a run stopped from outside still stops the stack


# First, so that `-m "not stack"` sees the marker when it deselects.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "e2e" in Path(str(item.fspath)).parts:
            item.add_marker(pytest.mark.stack)
    items.sort(key=lambda item: item.get_closest_marker("disruptive") is not None)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    config = StackConfig(
        run_dir=tmp_path_factory.mktemp("stack"),
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        gateway_port=free_port(),
        gateway_env={"GATEWAY_MODEL_ALIASES": '{"smollm2": "smollm2-135m-instruct"}'},
    )
    local = LocalStack(config)
    local.start()
    try:
        yield local
    finally:
        local.stop()
        # Triton, its stubs and vLLM's engine processes carry the run's marker: none may survive.
        left = stray_processes(config.run_dir)
        assert not left, f"processes left after stopping the stack: {left}"


@pytest.fixture(scope="session")
def base_url(stack: LocalStack) -> str:
    return f"{stack.gateway_url}/v1"


@pytest.fixture(scope="session")
def model_name(stack: LocalStack) -> str:
    return stack.config.model_name
