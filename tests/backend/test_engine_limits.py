"""The backend resolves the engine's batch limits as `vllm serve` does, on the card vLLM reports.

On the CPU platform every usage context gives 128 sequences, so comparing there proves nothing: vLLM's platform is
made to report an 80 GB H100 while it picks its batch defaults, and the backend's configuration is compared with
the one `vllm serve`'s own argument path builds from the same arguments.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator

import pytest
from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs
from vllm.platforms import current_platform
from vllm_backend import compat

from localstack.paths import CachePaths, default_cache_dir

# The default model, which `make test` prepares (scripts/install.sh): only its config is read.
MODEL = CachePaths(default_cache_dir()).default_model_dir
GIB = 1 << 30


@pytest.fixture
def reports_an_h100(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """While vLLM picks its batch defaults (and only then), the platform is an 80 GB H100."""
    original = EngineArgs.get_batch_defaults.__func__

    def on_an_h100(cls: type, *args: object, **kwargs: object) -> object:
        with monkeypatch.context() as patch:
            patch.setattr(current_platform, "get_device_total_memory", lambda *a, **k: 80 * GIB)
            patch.setattr(current_platform, "get_device_name", lambda *a, **k: "NVIDIA H100 80GB HBM3")
            patch.setattr(current_platform, "is_cpu", lambda: False)
            return original(cls, *args, **kwargs)

    monkeypatch.setattr(EngineArgs, "get_batch_defaults", classmethod(on_an_h100))
    yield


def _first(attr: str, *modules: str) -> object:
    """`attr` from the first of `modules` that has it (vLLM moves its server's modules between releases)."""
    for module in modules:
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"{attr} is in none of {modules}")


def _serve_config(cli: list[str]) -> object:
    """`vllm serve`'s path: its CLI parser, `AsyncEngineArgs.from_cli_args`, and the usage context that its
    `build_async_engine_client_from_engine_args` defaults to."""
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    make_arg_parser = _first("make_arg_parser", "vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args")
    build_client = _first(
        "build_async_engine_client_from_engine_args",
        "vllm.entrypoints.launchers.api_server.entry",
        "vllm.entrypoints.openai.api_server",
    )
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(cli)
    usage = inspect.signature(build_client).parameters["usage_context"]
    return AsyncEngineArgs.from_cli_args(args).create_engine_config(usage_context=usage.default)


def test_on_an_h100_the_backend_resolves_vllm_serves_batch_limits(reports_an_h100: None) -> None:
    backend = compat.batch_limits(compat.engine_config({"model": str(MODEL), "max_model_len": 2048}))
    serve = compat.batch_limits(_serve_config(["--model", str(MODEL), "--max-model-len", "2048"]))
    assert backend == serve
    assert backend[0] > 128, "the engine context's default of 128 sequences, not vllm serve's"


def test_model_json_values_still_win(reports_an_h100: None) -> None:
    config = compat.engine_config(
        {"model": str(MODEL), "max_model_len": 2048, "max_num_seqs": 96, "max_num_batched_tokens": 4096}
    )
    assert compat.batch_limits(config) == (96, 4096)
