"""Shared fixtures. End-to-end tests share one local stack (Triton + vLLM + gateway) per session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from localstack.model_choice import resolve_model
from localstack.net import free_port
from localstack.paths import FAST_MODEL_NAME, CachePaths, default_cache_dir
from localstack.processes import ENGINE_SESSION_NICE_VAR, stop_on_sigterm
from localstack.stack import LocalStack
from localstack.stack_config import StackConfig
from localstack.processes import stray_processes
from tests.redis_server import redis_server


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "disruptive: kills parts of the shared stack; runs after every other test")
    stop_on_sigterm()  # a run stopped from outside still stops the stack
    # The tests' stacks keep the engine's session at the default rank (`make up` and the benchmarks rank it
    # lower): ranked lower, the fleet tests' paused engines sometimes failed to start their streams in time.
    os.environ.setdefault(ENGINE_SESSION_NICE_VAR, "0")


# First, so that `-m "not stack"` sees the marker when it deselects.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "e2e" in Path(str(item.fspath)).parts:
            item.add_marker(pytest.mark.stack)
    items.sort(key=lambda item: item.get_closest_marker("disruptive") is not None)


def _free_ports() -> dict[str, int]:
    return {name: free_port() for name in ("http_port", "grpc_port", "metrics_port", "gateway_port")}


def _run_stack(config: StackConfig) -> Iterator[LocalStack]:
    """Starts the stack, and after the session checks that nothing it started survives it."""
    local = LocalStack(config)
    local.start()
    _SESSION_STACKS.append(local)
    try:
        yield local
    finally:
        _SESSION_STACKS.remove(local)
        local.stop()
        # Triton, its stubs and vLLM's engine processes carry the run's marker: none may survive.
        left = stray_processes(config.run_dir)
        assert not left, f"processes left after stopping the stack: {left}"


_SESSION_STACKS: list[LocalStack] = []


@pytest.fixture(autouse=True, scope="module")
def session_stacks_survive_the_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """A session stack whose Triton died fails every later test: name the module after which it happened, with
    Triton's log, so that the failures point at their cause (the disruptive tests restart what they kill)."""
    yield
    for local in _SESSION_STACKS:
        if local.triton is not None and not local.triton.running():
            pytest.fail(f"{local.config.run_dir.name}: Triton died during {request.node.name}: {local.health()}")


# The model the `stack` fixture serves instead of the default one: a prepared model's name or a Hugging Face
# folder. For a host that has only what travels with the checkout (scripts/gpu_e2e.sh: the tiny random Llama).
TEST_MODEL_VAR = "LOCALSTACK_TEST_MODEL"


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    run_dir = tmp_path_factory.mktemp("stack")
    choice = os.environ.get(TEST_MODEL_VAR, "").strip()
    if choice:
        model = resolve_model(choice, CachePaths(default_cache_dir()))
        yield from _run_stack(StackConfig.serving(model, run_dir=run_dir, **_free_ports()))
        return
    config = StackConfig(
        run_dir=run_dir,
        gateway_env={"GATEWAY_MODEL_ALIASES": '{"smollm2": "smollm2-135m-instruct"}'},
        **_free_ports(),
    )
    yield from _run_stack(config)


@pytest.fixture(scope="session")
def fast_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """The stack serving the tiny random Llama (`make up MODEL=tiny-random-llama`): vLLM's real engine, stepping
    in milliseconds, for tests that need more tokens per second than the front end can carry.
    Its model is `fast_stack.config.model_name`."""
    model = resolve_model(FAST_MODEL_NAME, CachePaths(default_cache_dir()))
    yield from _run_stack(StackConfig.serving(model, run_dir=tmp_path_factory.mktemp("fast_stack"), **_free_ports()))


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A redis-server of the test's own, stopped after it."""
    with redis_server(tmp_path) as url:
        yield url


@pytest.fixture(scope="session")
def base_url(stack: LocalStack) -> str:
    return f"{stack.gateway_url}/v1"


@pytest.fixture(scope="session")
def model_name(stack: LocalStack) -> str:
    return stack.config.model_name
