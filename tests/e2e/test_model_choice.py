"""Serving another model: the fast model chosen by name (`make up MODEL=tiny-random-llama`, the `fast_stack`
fixture) answers completions and chats through the gateway, and `make up MODEL_REPOSITORY=...` serves every
model of a repository, then stops everything it started on Ctrl-C."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import httpx

from localstack.model_choice import FAST_MODEL_MEMORY_SHARE
from localstack.model_repo import write_model_repository
from localstack.net import free_port
from localstack.paths import REPO_ROOT, CachePaths, default_cache_dir
from localstack.processes import Service, wait_until
from localstack.stack import LocalStack
from localstack.processes import stray_processes

READY_LINE = "[up] ready"
# A Triton model named unlike any prepared model: what is served comes from the repository.
REPOSITORY_MODEL = "tiny-llama-from-a-repository"


def test_fast_model_completes_256_tokens_after_a_long_prompt(fast_stack: LocalStack) -> None:
    body = {
        "model": fast_stack.config.model_name,
        "prompt": " ".join(f"word{i}" for i in range(32)),
        "max_tokens": 256,
        "ignore_eos": True,
    }
    response = httpx.post(f"{fast_stack.gateway_url}/v1/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    assert usage["prompt_tokens"] >= 128 and usage["completion_tokens"] == 256
    assert response.json()["choices"][0]["finish_reason"] == "length"


def test_fast_model_chats_with_its_template(fast_stack: LocalStack) -> None:
    body = {
        "model": fast_stack.config.model_name,
        "messages": [{"role": "user", "content": "Hello!"}],
        "max_completion_tokens": 8,
        "temperature": 0,
    }
    response = httpx.post(f"{fast_stack.gateway_url}/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    # "<|user|>\nHello!</s>\n<|assistant|>\n" is more tokens than the message alone.
    assert response.json()["usage"]["prompt_tokens"] > 4
    assert response.json()["choices"][0]["message"]["role"] == "assistant"


def _up_with_repository(repository: Path, run_dir: Path, gateway_port: int) -> Service:
    """`make up MODEL_REPOSITORY=<repository>` on free ports."""
    argv = [
        sys.executable, "-m", "localstack.up", "--model-repository", str(repository), "--run-dir", str(run_dir),
        "--port", str(gateway_port), "--http-port", str(free_port()), "--grpc-port", str(free_port()),
        "--metrics-port", str(free_port()),
    ]  # fmt: skip
    env = {**os.environ, "MODEL": ""}  # the repository alone, whatever the caller's shell holds
    return Service("up", argv, env, run_dir / "up.out", cwd=REPO_ROOT)


def test_up_serves_a_model_repository_and_stops_everything_on_ctrl_c(tmp_path: Path) -> None:
    cache = CachePaths(default_cache_dir())
    repository = write_model_repository(
        tmp_path / "repository", cache.fast_model_dir, REPOSITORY_MODEL, FAST_MODEL_MEMORY_SHARE
    )
    run_dir, port = tmp_path / "up", free_port()
    up = _up_with_repository(repository, run_dir, port)
    try:
        started = wait_until(lambda: READY_LINE in up.log_tail(), 600, 1.0, up)
        assert started, up.log_tail()
        assert f"(model: {REPOSITORY_MODEL})" in up.log_tail()
        body = {"model": REPOSITORY_MODEL, "prompt": "Once upon a time", "max_tokens": 4}
        response = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=60)
        assert response.status_code == 200, response.text
        assert response.json()["usage"]["completion_tokens"] > 0
        up.process.send_signal(signal.SIGINT)
        assert up.process.wait(timeout=90) == 0, up.log_tail()
        assert "[up] stopped." in up.log_tail()
        assert not stray_processes(run_dir)
    finally:
        up.stop()

