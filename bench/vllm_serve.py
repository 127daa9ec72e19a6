"""C: vLLM's own OpenAI server on the same model folder and the same engine arguments as our backend's
(localstack.model_repo.cpu_engine_args), so the comparison differs only in what sits in front of the engine."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from localstack.net import http_ok
from localstack.model_repo import ENGINE_MEMORY_SHARE, cpu_engine_args
from localstack.paths import DEFAULT_MODEL_NAME
from localstack.processes import Service, engine_session_nice, lower_session_priority, wait_until


class VllmServeError(RuntimeError):
    """The server did not come up; the message carries its last log lines."""


def engine_flags(engine_args: dict[str, Any]) -> list[str]:
    """Engine-argument dict to CLI flags: `max_model_len: 2048` -> `--max-model-len 2048`; booleans as switches."""
    flags: list[str] = []
    for key, value in engine_args.items():
        if key == "model":
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                flags.append(flag)
            elif key.startswith("enable_"):  # vLLM's on-by-default switches take a --no- form
                flags.append("--no-" + flag[2:])
        elif value is not None:
            flags += [flag, str(value)]
    return flags


def serve_argv(
    model_dir: Path, port: int, served_name: str = DEFAULT_MODEL_NAME, memory_share: float = ENGINE_MEMORY_SHARE,
    overrides: dict[str, Any] | None = None,
) -> list[str]:  # fmt: skip
    """`overrides` replace engine arguments (None drops one), e.g. C' = C with `stream_interval`."""
    engine_args = {**cpu_engine_args(model_dir, memory_share), **(overrides or {})}
    return [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir),
        "--served-model-name", served_name,
        "--host", "127.0.0.1",
        "--port", str(port),
        *engine_flags(engine_args),
    ]  # fmt: skip


def _env() -> dict[str, str]:
    """What Triton's environment gives the engine (LocalStack._triton_env), minus Triton's own libraries."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env.setdefault("VLLM_CONFIGURE_LOGGING", "1")
    env["LC_ALL"] = "C.UTF-8"
    env["HF_HUB_OFFLINE"] = "1"
    env.pop("PYTHONPATH", None)
    return env


class VllmServer:
    """`python -m vllm.entrypoints.openai.api_server` as a supervised child; the engine's first start
    compiles for a minute or two."""

    def __init__(
        self, model_dir: Path, port: int, log_path: Path, memory_share: float = ENGINE_MEMORY_SHARE,
        served_name: str = DEFAULT_MODEL_NAME, overrides: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        self.model_dir = model_dir
        self.memory_share = memory_share
        self.served_name = served_name
        self.overrides = overrides
        self.port = port
        self.log_path = log_path
        self.service: Service | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 900.0) -> "VllmServer":
        argv = serve_argv(self.model_dir, self.port, self.served_name, self.memory_share, self.overrides)
        self.service = Service("vllm-serve", argv, _env(), self.log_path)
        if not wait_until(lambda: http_ok(f"{self.url}/health"), timeout_s, 1.0, self.service):
            tail = self.service.log_tail()
            self.stop()
            raise VllmServeError(f"vllm serve did not become healthy:\n{tail}")
        lower_session_priority(self.service.pid, engine_session_nice())  # as the local stack ranks Triton's
        return self

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop()
            self.service = None

    def __enter__(self) -> "VllmServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
