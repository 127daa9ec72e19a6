"""Shared fixtures. End-to-end tests share one local stack (Triton + vLLM + gateway) per session."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from localstack.stack import LocalStack, StackConfig

ENGINE_PROCESS_MARKERS = ("tritonserver", "triton_python_backend_stub", "VLLM::")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def engine_processes() -> list[str]:
    """Triton, stub and vLLM engine processes still alive on this machine."""
    found = []
    for process in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            text = " ".join([process.info["name"] or ""] + (process.info["cmdline"] or []))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if any(marker in text for marker in ENGINE_PROCESS_MARKERS):
            found.append(f"{process.info['pid']}: {text[:120]}")
    return found


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    before = set(engine_processes())
    config = StackConfig(
        run_dir=tmp_path_factory.mktemp("stack"),
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        gateway_port=free_port(),
    )
    local = LocalStack(config)
    local.start()
    try:
        yield local
    finally:
        local.stop()
        left = [p for p in engine_processes() if p not in before]
        assert not left, f"processes left after stopping the stack: {left}"


@pytest.fixture(scope="session")
def base_url(stack: LocalStack) -> str:
    return f"{stack.gateway_url}/v1"


@pytest.fixture(scope="session")
def model_name(stack: LocalStack) -> str:
    return stack.config.model_name


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "disruptive: kills parts of the shared stack; runs after every other test")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "e2e" in Path(str(item.fspath)).parts:
            item.add_marker(pytest.mark.stack)
    items.sort(key=lambda item: item.get_closest_marker("disruptive") is not None)
